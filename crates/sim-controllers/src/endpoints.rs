//! The Endpoints controller: for every Service with a selector (and not of type
//! ExternalName), the core/v1 Endpoints of the same name listing the selected pods as
//! kube-controller-manager writes them (`pkg/controller/endpoint`): each pod with an IP of
//! the Service's first family that has not ended (terminating ones only under
//! `publishNotReadyAddresses`) is an address (`ip`, `nodeName`, a `targetRef` to the pod,
//! its `hostname` when its `subdomain` names the Service) among `addresses` when Ready (or
//! always under `publishNotReadyAddresses`), else among `notReadyAddresses`; addresses
//! with the same ports are packed into one subset. The Endpoints carry the Service's
//! labels, `endpoints.kubernetes.io/managed-by: endpoint-controller` (and
//! `service.kubernetes.io/headless` for a headless Service), the
//! `endpoints.kubernetes.io/last-change-trigger-time` annotation as upstream sets it, and
//! are cut to 1000 addresses (`endpoints.kubernetes.io/over-capacity: truncated`). They are
//! deleted with their Service.
//!
//! # Caveats
//! - When several subsets are needed (pods whose ports differ), upstream orders them, and
//!   the ports within each, by a hash of their Go dump; here subsets come in the order of
//!   their addresses and ports in the Service's order.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, ObjectReference, Pod, Service,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};

use super::endpointslice::{
    HEADLESS_LABEL, TriggerTimes, find_port, services_of, services_to_update,
    set_trigger_time_annotation, should_be_in_endpoints, should_set_hostname,
};
use super::informer::{AbortOnDrop, Cache, Change, ObjectKey};
use super::queue::Queue;
use super::support::{is_not_found, is_ready};

/// The label naming the manager of an Endpoints.
const MANAGED_BY_LABEL: &str = "endpoints.kubernetes.io/managed-by";
/// Its value on the Endpoints this controller writes.
const CONTROLLER_NAME: &str = "endpoint-controller";
/// The annotation of an Endpoints cut to [`MAX_CAPACITY`].
const OVER_CAPACITY_ANNOTATION: &str = "endpoints.kubernetes.io/over-capacity";
/// Most addresses of one Endpoints (`maxCapacity`).
const MAX_CAPACITY: usize = 1000;

/// Errors of one Service's sync (retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request to the API server failed.
    #[error("request to the api server failed")]
    Api(#[from] kube::Error),
    /// The cache still shows a version the controller has already replaced.
    #[error("endpoints informer cache is out of date, resource version {0} already processed")]
    StaleCache(String),
}

/// The listers the controller reads.
#[derive(Clone)]
pub(crate) struct Listers {
    pub(crate) services: Cache<Service>,
    pub(crate) pods: Cache<Pod>,
    pub(crate) endpoints: Cache<Endpoints>,
}

struct Controller {
    client: Client,
    listers: Listers,
    queue: Queue<ObjectKey>,
    triggers: TriggerTimes,
    /// The versions of Endpoints this controller has replaced (`staleEndpointsTracker`).
    replaced: Mutex<HashMap<ObjectKey, String>>,
}

/// Subscribes the controller to the caches and starts its worker.
pub(crate) fn start(client: Client, listers: Listers) -> AbortOnDrop {
    let controller = Arc::new(Controller {
        client,
        listers: listers.clone(),
        queue: Queue::new(),
        triggers: TriggerTimes::default(),
        replaced: Mutex::default(),
    });
    let c = controller.clone();
    listers.services.subscribe(move |change| {
        c.queue.add(ObjectKey::of(change.object().as_ref()));
    });
    let c = controller.clone();
    listers.pods.subscribe(move |change| {
        let services = match change {
            Change::Applied {
                old: Some(old),
                new,
            } => services_to_update(&c.listers.services, old, new),
            Change::Applied { old: None, new } => services_of(&c.listers.services, new),
            Change::Deleted(old) => services_of(&c.listers.services, old),
        };
        for key in services {
            c.queue.add(key);
        }
    });
    let c = controller.clone();
    listers.endpoints.subscribe(move |change| {
        // A deleted Endpoints of a Service that still exists is written again.
        if let Change::Deleted(old) = change {
            let key = ObjectKey::of(old.as_ref());
            if c.listers.services.get(&key.namespace, &key.name).is_some() {
                c.queue.add(key);
            }
        }
    });
    AbortOnDrop::spawn(async move { controller.run().await })
}

/// The address of a pod for the Service (`podToEndpointAddressForService`): its first IP
/// of the Service's first family.
fn address_of(service: &Service, pod: &Pod) -> Option<EndpointAddress> {
    let spec = service.spec.as_ref();
    let want_ipv6 = spec
        .and_then(|s| s.ip_families.as_ref())
        .and_then(|f| f.first())
        .is_some_and(|f| f == "IPv6");
    let ip = pod
        .status
        .as_ref()?
        .pod_ips
        .iter()
        .flatten()
        .filter_map(|ip| ip.ip.parse::<std::net::IpAddr>().ok())
        .find(|ip| ip.is_ipv6() == want_ipv6)?;
    Some(EndpointAddress {
        ip: ip.to_string(),
        node_name: Some(
            pod.spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default(),
        ),
        hostname: should_set_hostname(pod, service)
            .then(|| pod.spec.as_ref().and_then(|s| s.hostname.clone()))
            .flatten(),
        target_ref: Some(ObjectReference {
            kind: Some("Pod".into()),
            namespace: pod.metadata.namespace.clone(),
            name: pod.metadata.name.clone(),
            uid: pod.metadata.uid.clone(),
            ..ObjectReference::default()
        }),
    })
}

/// One address with its ports and readiness, before packing.
struct Entry {
    address: EndpointAddress,
    port: Option<EndpointPort>,
    ready: bool,
}

/// The entries of the Service's pods (what `addEndpointSubset` collects).
fn entries(service: &Service, pods: &[Arc<Pod>]) -> Vec<Entry> {
    let spec = service.spec.clone().unwrap_or_default();
    let publish = spec.publish_not_ready_addresses.unwrap_or(false);
    let ports = spec.ports.clone().unwrap_or_default();
    let mut all = Vec::new();
    for pod in pods {
        if !should_be_in_endpoints(pod, publish) {
            continue;
        }
        let Some(address) = address_of(service, pod) else {
            continue;
        };
        let ready = publish || is_ready(pod);
        if ports.is_empty() {
            if spec.cluster_ip.as_deref() == Some("None") {
                all.push(Entry {
                    address,
                    port: None,
                    ready,
                });
            }
            continue;
        }
        for port in &ports {
            let Some(number) = find_port(pod, port) else {
                continue;
            };
            all.push(Entry {
                address: address.clone(),
                port: Some(EndpointPort {
                    name: port.name.clone().filter(|n| !n.is_empty()),
                    port: number,
                    protocol: Some(port.protocol.clone().unwrap_or_else(|| "TCP".into())),
                    app_protocol: port.app_protocol.clone(),
                }),
                ready,
            });
        }
    }
    all
}

/// `LessEndpointAddress`: by IP, then by the pod's uid.
fn address_order(a: &EndpointAddress, b: &EndpointAddress) -> std::cmp::Ordering {
    let uid = |x: &EndpointAddress| x.target_ref.as_ref().and_then(|t| t.uid.clone());
    a.ip.as_bytes()
        .cmp(b.ip.as_bytes())
        .then_with(|| uid(a).cmp(&uid(b)))
}

fn address_key(address: &EndpointAddress) -> AddressKey {
    (
        address.ip.clone(),
        address.target_ref.as_ref().and_then(|t| t.uid.clone()),
    )
}

/// An address by its IP and its pod's uid (`addressKey`).
type AddressKey = (String, Option<String>);

/// The addresses of one port, each ready or not.
type Readiness = BTreeMap<AddressKey, bool>;

/// `RepackSubsets`: the ports that have the same addresses (with the same readiness)
/// share a subset; an address not ready for a port stays not ready for it.
fn repack(entries: Vec<Entry>) -> Vec<EndpointSubset> {
    let mut addresses: BTreeMap<AddressKey, EndpointAddress> = BTreeMap::new();
    // Port (or none) -> address key -> ready; ports in their first-seen order.
    let mut by_port: Vec<(Option<EndpointPort>, Readiness)> = Vec::new();
    for entry in entries {
        let key = address_key(&entry.address);
        addresses.entry(key.clone()).or_insert(entry.address);
        let position = match by_port.iter().position(|(p, _)| *p == entry.port) {
            Some(i) => i,
            None => {
                by_port.push((entry.port.clone(), BTreeMap::new()));
                by_port.len() - 1
            }
        };
        let set = &mut by_port[position].1;
        match set.get(&key) {
            Some(false) => {}
            _ => {
                set.insert(key, entry.ready);
            }
        }
    }
    let mut groups: Vec<(Readiness, Vec<EndpointPort>)> = Vec::new();
    for (port, set) in by_port {
        let position = match groups.iter().position(|(s, _)| *s == set) {
            Some(i) => i,
            None => {
                groups.push((set, Vec::new()));
                groups.len() - 1
            }
        };
        if let Some(port) = port.filter(|p| p.port > 0) {
            groups[position].1.push(port);
        }
    }
    let mut subsets: Vec<EndpointSubset> = groups
        .into_iter()
        .map(|(set, ports)| {
            let mut ready = Vec::new();
            let mut not_ready = Vec::new();
            for (key, is_ready) in set {
                let address = addresses[&key].clone();
                if is_ready {
                    ready.push(address);
                } else {
                    not_ready.push(address);
                }
            }
            ready.sort_by(address_order);
            not_ready.sort_by(address_order);
            EndpointSubset {
                addresses: (!ready.is_empty()).then_some(ready),
                not_ready_addresses: (!not_ready.is_empty()).then_some(not_ready),
                ports: (!ports.is_empty()).then_some(ports),
            }
        })
        .collect();
    subsets.sort_by(|a, b| {
        let first = |s: &EndpointSubset| {
            s.addresses
                .iter()
                .chain(s.not_ready_addresses.iter())
                .flatten()
                .next()
                .map(address_key)
        };
        first(a).cmp(&first(b))
    });
    subsets
}

fn count(subsets: &[EndpointSubset]) -> (usize, usize) {
    subsets.iter().fold((0, 0), |(r, n), s| {
        (
            r + s.addresses.as_ref().map_or(0, Vec::len),
            n + s.not_ready_addresses.as_ref().map_or(0, Vec::len),
        )
    })
}

/// `truncateEndpoints`: cuts the addresses to [`MAX_CAPACITY`], not-ready ones first,
/// each subset keeping its share; whether it cut.
fn truncate(subsets: &mut [EndpointSubset]) -> bool {
    let (ready, not_ready) = count(subsets);
    if ready + not_ready <= MAX_CAPACITY {
        return false;
    }
    let cut_ready = ready > MAX_CAPACITY;
    let (max, total) = if cut_ready {
        (MAX_CAPACITY, ready)
    } else {
        (MAX_CAPACITY - ready, not_ready)
    };
    let mut room = max;
    for subset in subsets.iter_mut() {
        let list = if cut_ready {
            subset.addresses.get_or_insert_with(Vec::new)
        } else {
            subset.not_ready_addresses.get_or_insert_with(Vec::new)
        };
        let share = (list.len() * max).div_ceil(total.max(1)).min(room);
        list.truncate(share);
        room -= list.len();
        if cut_ready {
            subset.not_ready_addresses = Some(Vec::new());
        }
    }
    true
}

/// Subsets equal apart from the targets' resourceVersions.
fn same_subsets(a: &[EndpointSubset], b: &[EndpointSubset]) -> bool {
    let plain = |subsets: &[EndpointSubset]| -> Vec<EndpointSubset> {
        subsets
            .iter()
            .cloned()
            .map(|mut s| {
                for list in [&mut s.addresses, &mut s.not_ready_addresses] {
                    for address in list.iter_mut().flatten() {
                        if let Some(t) = address.target_ref.as_mut() {
                            t.resource_version = None;
                        }
                    }
                    if list.as_ref().is_some_and(Vec::is_empty) {
                        *list = None;
                    }
                }
                if s.ports.as_ref().is_some_and(Vec::is_empty) {
                    s.ports = None;
                }
                s
            })
            .collect()
    };
    plain(a) == plain(b)
}

/// `labelsCorrectForEndpoints`.
fn labels_correct(
    endpoints: &BTreeMap<String, String>,
    service: &BTreeMap<String, String>,
) -> bool {
    if endpoints.get(MANAGED_BY_LABEL).map(String::as_str) != Some(CONTROLLER_NAME) {
        return false;
    }
    let mut skipped = 0;
    for (k, v) in endpoints {
        if k == HEADLESS_LABEL || k == MANAGED_BY_LABEL {
            skipped += 1;
        } else if service.get(k) != Some(v) {
            return false;
        }
    }
    service.len() == endpoints.len() - skipped
}

impl Controller {
    async fn run(self: Arc<Self>) {
        let l = &self.listers;
        l.services.wait_ready().await;
        l.pods.wait_ready().await;
        l.endpoints.wait_ready().await;
        loop {
            let key = self.queue.next().await;
            let outcome = self.sync(&key).await;
            if let Some(error) = self.queue.settle(&key, outcome) {
                tracing::debug!(service = %key, error = %super::support::error_chain(&error), "endpoints sync failed; retrying");
            }
        }
    }

    fn replaced(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectKey, String>> {
        self.replaced.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn sync(&self, key: &ObjectKey) -> Result<Option<Duration>, Error> {
        let api: Api<Endpoints> = Api::namespaced(self.client.clone(), &key.namespace);
        let Some(service) = self.listers.services.get(&key.namespace, &key.name) else {
            match api.delete(&key.name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
            self.triggers.forget(key);
            self.replaced().remove(key);
            return Ok(None);
        };
        let spec = service.spec.clone().unwrap_or_default();
        let selector = spec.selector.clone().filter(|s| !s.is_empty());
        if spec.type_.as_deref() == Some("ExternalName") || selector.is_none() {
            return Ok(None);
        }
        let mut pods = self.listers.pods.filter(|p| {
            p.metadata.namespace.as_deref() == Some(&key.namespace)
                && super::endpointslice::picks(
                    &service,
                    &p.metadata.labels.clone().unwrap_or_default(),
                )
        });
        pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let trigger = self.triggers.compute(&service, &pods);
        let subsets = repack(entries(&service, &pods));
        let service_labels = service.metadata.labels.clone().unwrap_or_default();
        let current = self.listers.endpoints.get(&key.namespace, &key.name);
        if let Some(current) = &current {
            let version = current
                .metadata
                .resource_version
                .clone()
                .unwrap_or_default();
            if self.replaced().get(key) == Some(&version) {
                return Err(Error::StaleCache(version));
            }
        }
        let mut endpoints = match &current {
            Some(current) => {
                let labels = current.metadata.labels.clone().unwrap_or_default();
                let (total_ready, total_not_ready) =
                    count(current.subsets.as_deref().unwrap_or_default());
                let capacity_right = total_ready + total_not_ready <= MAX_CAPACITY
                    && !current
                        .metadata
                        .annotations
                        .as_ref()
                        .is_some_and(|a| a.contains_key(OVER_CAPACITY_ANNOTATION));
                if same_subsets(current.subsets.as_deref().unwrap_or_default(), &subsets)
                    && labels_correct(&labels, &service_labels)
                    && capacity_right
                {
                    return Ok(None);
                }
                current.as_ref().clone()
            }
            None => Endpoints {
                metadata: ObjectMeta {
                    name: Some(key.name.clone()),
                    ..ObjectMeta::default()
                },
                ..Endpoints::default()
            },
        };
        let mut subsets = subsets;
        let annotations = endpoints
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new);
        set_trigger_time_annotation(annotations, trigger);
        if truncate(&mut subsets) {
            annotations.insert(OVER_CAPACITY_ANNOTATION.into(), "truncated".into());
        } else {
            annotations.remove(OVER_CAPACITY_ANNOTATION);
        }
        endpoints.subsets = Some(subsets);
        let mut labels = service_labels;
        let headless = matches!(spec.cluster_ip.as_deref(), None | Some("" | "None"));
        if headless {
            labels.insert(HEADLESS_LABEL.into(), String::new());
        } else {
            labels.remove(HEADLESS_LABEL);
        }
        labels.insert(MANAGED_BY_LABEL.into(), CONTROLLER_NAME.into());
        endpoints.metadata.labels = Some(labels);
        match &current {
            None => match api.create(&PostParams::default(), &endpoints).await {
                Ok(_) => {}
                Err(kube::Error::Api(status))
                    if status.code == 403
                        && status.message.contains("because it is being terminated") =>
                {
                    return Ok(None);
                }
                Err(e) => return Err(e.into()),
            },
            Some(current) => {
                let updated = api
                    .replace(&key.name, &PostParams::default(), &endpoints)
                    .await?;
                if updated.metadata.resource_version != current.metadata.resource_version {
                    let version = current
                        .metadata
                        .resource_version
                        .clone()
                        .unwrap_or_default();
                    self.replaced().insert(key.clone(), version);
                }
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, ip: &str, ready: bool) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns", "uid": format!("u-{name}"), "labels": {"app": "web"}},
                "spec": {"containers": [{"name": "main", "image": "app",
                                         "ports": [{"name": "http", "containerPort": 8080}]}]},
                "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                           "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}}))
            .unwrap(),
        )
    }

    fn service(spec: serde_json::Value) -> Service {
        serde_json::from_value(
            json!({"metadata": {"name": "web", "namespace": "ns"}, "spec": spec}),
        )
        .unwrap()
    }

    #[test]
    fn ready_and_unready_pods_with_the_same_ports_share_one_subset() {
        let s = service(json!({"selector": {"app": "web"}, "ipFamilies": ["IPv4"],
                               "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}]}));
        let subsets = repack(entries(
            &s,
            &[pod("b", "10.0.0.2", false), pod("a", "10.0.0.1", true)],
        ));
        assert_eq!(
            serde_json::to_value(&subsets).unwrap(),
            json!([{"addresses": [{"ip": "10.0.0.1", "nodeName": "",
                                   "targetRef": {"kind": "Pod", "namespace": "ns", "name": "a", "uid": "u-a"}}],
                    "notReadyAddresses": [{"ip": "10.0.0.2", "nodeName": "",
                                           "targetRef": {"kind": "Pod", "namespace": "ns", "name": "b", "uid": "u-b"}}],
                    "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}])
        );
    }

    #[test]
    fn publishing_not_ready_addresses_makes_every_address_ready() {
        let s = service(
            json!({"selector": {"app": "web"}, "ipFamilies": ["IPv4"], "publishNotReadyAddresses": true,
                               "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}]}),
        );
        let subsets = repack(entries(&s, &[pod("b", "10.0.0.2", false)]));
        assert_eq!(subsets[0].addresses.as_ref().map(Vec::len), Some(1));
        assert!(subsets[0].not_ready_addresses.is_none());
    }

    #[test]
    fn more_than_a_thousand_addresses_are_cut_not_ready_ones_first() {
        let mut subsets = vec![EndpointSubset {
            addresses: Some(vec![
                EndpointAddress {
                    ip: "10.0.0.1".into(),
                    ..Default::default()
                };
                600
            ]),
            not_ready_addresses: Some(vec![
                EndpointAddress {
                    ip: "10.0.0.2".into(),
                    ..Default::default()
                };
                600
            ]),
            ports: None,
        }];
        assert!(truncate(&mut subsets));
        assert_eq!(count(&subsets), (600, 400));
    }

    #[test]
    fn labels_are_right_when_they_are_the_service_s_and_the_manager_s() {
        let service = BTreeMap::from([("tier".to_string(), "front".to_string())]);
        let mut labels = service.clone();
        assert!(!labels_correct(&labels, &service));
        labels.insert(MANAGED_BY_LABEL.into(), CONTROLLER_NAME.into());
        assert!(labels_correct(&labels, &service));
        labels.insert("extra".into(), "x".into());
        assert!(!labels_correct(&labels, &service));
    }
}
