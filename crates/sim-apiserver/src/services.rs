//! Services' cluster IPs and node ports, allocated as kube-apiserver 1.34's Service storage
//! allocates them (`pkg/registry/core/service/storage`: `beginCreate`, `beginUpdate` and
//! `afterDelete` of storage.go, alloc.go; the allocators of `ipallocator` and
//! `portallocator`), on a single-stack IPv4 cluster whose service range is
//! `10.0.0.0/24` and whose node ports are 30000-32767, as the local control plane is
//! configured:
//!
//! - **IP families.** `ipFamilyPolicy` defaults to `SingleStack` (`RequireDualStack` for a
//!   headless Service without a selector), `ipFamilies` to `[IPv4]`, inferred from the
//!   requested `clusterIPs`; dual-stack demands and IPv6 are refused as the real server
//!   refuses them on a single-stack cluster. ExternalName Services get none of this.
//! - **Cluster IPs.** A requested address is taken if it is in the range and free; else a
//!   random free one, first from the range above its first 16 addresses (kept for
//!   requests), then from those. Each address is an `IPAddress` object (named after it,
//!   `parentRef` the Service) created with the Service and deleted with it, or when an
//!   update gives it up (a change to `ExternalName`). An ExternalName Service changed to
//!   another type by an update is given an address as a new Service is (`updateClusterIPs`'
//!   case A), and its `IPAddress` once it is written. A dry run takes nothing: a dynamic
//!   address shows as the range's network address, and node ports count up from 32769, as
//!   the real dry-run allocators answer.
//! - **Node ports.** NodePort and LoadBalancer Services (unless
//!   `allocateLoadBalancerNodePorts: false`) get a random free port per service port, first
//!   from above the range's first 86 ports; a requested port is checked; ports of the same
//!   number share one; `healthCheckNodePort` for a LoadBalancer with `externalTrafficPolicy:
//!   Local`. The ports in use are those of the stored Services.
//! - **Updates.** What the server allocated is kept when a client leaves it out
//!   (`patchAllocatedValues`), the singular and plural cluster IP fields are kept in step
//!   (`normalizeClusterIPs`), allocated cluster IPs may not change, and node ports follow
//!   the type (allocated for NodePort, dropped for ClusterIP).
//!
//! # Caveats
//! - Allocation runs after the Service is defaulted and validated here; the real server
//!   allocates first, so for a Service that is invalid *and* asks for a taken address only
//!   the first of the two errors differs.
//! - kube-apiserver 1.34's allocator writes no `IPAddress` for the address an ExternalName
//!   Service gets by an update: its IPAddress repair controller writes it, at once on a
//!   server that has run a while but not in its first minutes. Here it is written with the
//!   Service.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::sync::Mutex;

use rand::Rng as _;
use serde_json::{Value, json};

use super::names::Cause;
use super::status::{ApiError, GroupResource};
use super::store::Store;
use super::system_objects;

/// The service range `10.0.0.0/24` (`--service-cluster-ip-range` of the local control
/// plane): its network address, its first and last assignable addresses.
const NETWORK: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 0);
const FIRST: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const LAST: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 254);
/// Addresses at the bottom of the range kept for requests (`calculateRangeOffset`: a /24
/// has 256 addresses, 256 / 16 = 16).
const IP_OFFSET: u32 = 16;
/// The node port range (`--service-node-port-range` default) and the ports at its bottom
/// kept for requests (2768 ports / 32 = 86).
const NODE_PORT_FIRST: i64 = 30000;
const NODE_PORT_LAST: i64 = 32767;
const NODE_PORT_OFFSET: i64 = 86;
/// The first node port a dry run answers (`PortAllocationOperation.AllocateNext`'s guess,
/// above the range).
const DRY_RUN_FIRST_PORT: i64 = 32769;

/// Where the `IPAddress` objects are.
pub(crate) const IPADDRESSES: (&str, &str) = ("networking.k8s.io", "ipaddresses");

/// Held while a Service's addresses and ports are chosen and it is written, so two writes
/// never pick the same free port.
static ALLOCATING: Mutex<()> = Mutex::new(());

/// Whether `(group, resource)` is core Services.
pub(crate) fn serves(group: &str, resource: &str) -> bool {
    group.is_empty() && resource == "services"
}

/// Serializes allocations: hold the guard from choosing to writing.
pub(crate) fn lock() -> std::sync::MutexGuard<'static, ()> {
    ALLOCATING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What is taken when a Service is written: the node ports of the stored Services (their
/// ports' and health check node ports, but those of the Service being written) and the
/// addresses with an `IPAddress` object. Read before the write, under [`lock`].
#[derive(Debug, Default)]
pub(crate) struct Taken {
    ports: BTreeSet<i64>,
    addresses: BTreeSet<String>,
    /// Whether the write is a dry run, which takes nothing.
    dry_run: bool,
}

/// What is taken now, leaving out the node ports of the Service `namespace`/`name`, for a
/// write that is a dry run or not.
pub(crate) fn taken(store: &Store, namespace: &str, name: &str, dry_run: bool) -> Taken {
    let (services, _) = store.list(&GroupResource::new("", "services"), None);
    let ports = services
        .iter()
        .filter(|s| s["metadata"]["namespace"] != namespace || s["metadata"]["name"] != name)
        .flat_map(node_ports_of)
        .collect();
    let (addresses, _) = store.list(&GroupResource::new(IPADDRESSES.0, IPADDRESSES.1), None);
    let addresses = addresses
        .iter()
        .filter_map(|a| a["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    Taken {
        ports,
        addresses,
        dry_run,
    }
}

fn node_ports_of(service: &Value) -> Vec<i64> {
    let mut ports: Vec<i64> = ports(service)
        .iter()
        .filter_map(|p| p["nodePort"].as_i64())
        .filter(|p| *p != 0)
        .collect();
    if needs_health_check(service)
        && let Some(port) = service["spec"]["healthCheckNodePort"]
            .as_i64()
            .filter(|p| *p != 0)
    {
        ports.push(port);
    }
    ports
}

fn ports(service: &Value) -> Vec<Value> {
    service["spec"]["ports"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn service_type(service: &Value) -> &str {
    service["spec"]["type"].as_str().unwrap_or_default()
}

fn cluster_ips(service: &Value) -> Vec<String> {
    service["spec"]["clusterIPs"]
        .as_array()
        .map(|ips| {
            ips.iter()
                .map(|ip| ip.as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn is_headless(service: &Value) -> bool {
    match cluster_ips(service).first() {
        Some(ip) => ip == "None",
        None => service["spec"]["clusterIP"] == "None",
    }
}

fn has_selector(service: &Value) -> bool {
    service["spec"]["selector"]
        .as_object()
        .is_some_and(|s| !s.is_empty())
}

/// `needsNodePort`.
fn needs_node_ports(service: &Value) -> bool {
    match service_type(service) {
        "NodePort" => true,
        "LoadBalancer" => service["spec"]["allocateLoadBalancerNodePorts"] != false,
        _ => false,
    }
}

/// `apiservice.NeedsHealthCheck`.
fn needs_health_check(service: &Value) -> bool {
    service_type(service) == "LoadBalancer" && service["spec"]["externalTrafficPolicy"] == "Local"
}

/// What a create or update took: the `IPAddress` objects to write with the Service.
#[derive(Debug, Default)]
pub(crate) struct Allocated {
    addresses: Vec<String>,
}

impl Allocated {
    /// The `IPAddress` objects to write once the Service `namespace`/`name` is stored.
    pub(crate) fn addresses(self, namespace: &str, name: &str) -> Vec<Value> {
        self.addresses
            .iter()
            .map(|ip| system_objects::service_ip_address(ip, namespace, name))
            .collect()
    }
}

/// What `beginCreate` does to a new Service `svc` (defaulted, in stored form): its IP
/// family fields, its cluster IP and its node ports, chosen against `taken`.
///
/// # Errors
/// The real server's 422 for IP family fields this cluster cannot serve and for requested
/// addresses or ports that are out of range or taken; a 500 when a range is full.
pub(crate) fn allocate_create(
    taken: &mut Taken,
    svc: &mut Value,
    dry_run: bool,
) -> Result<Allocated, ApiError> {
    let name = svc["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let invalid = |causes: Vec<Cause>| ApiError::invalid("Service", "", &name, causes);
    normalize_cluster_ips(svc, None);
    init_ip_family_fields(svc, None).map_err(invalid)?;
    let mut allocated = Allocated::default();
    if service_type(svc) != "ExternalName" && !is_headless(svc) {
        let ip = allocate_cluster_ip(&taken.addresses, svc, dry_run)?;
        if !dry_run {
            taken.addresses.insert(ip.clone());
            allocated.addresses.push(ip);
        }
    }
    let used = &mut taken.ports;
    if matches!(service_type(svc), "NodePort" | "LoadBalancer") {
        init_node_ports(svc, used, dry_run).map_err(|e| e.into_api(&name))?;
    }
    if needs_health_check(svc) {
        allocate_health_check_port(svc, used, dry_run)?;
    }
    Ok(allocated)
}

/// `allocClusterIPs` of a single-stack cluster: the requested cluster IP of `svc`, or a free
/// one, written to both of its cluster IP fields.
fn allocate_cluster_ip(
    addresses: &BTreeSet<String>,
    svc: &mut Value,
    dry_run: bool,
) -> Result<String, ApiError> {
    let name = svc["metadata"]["name"].as_str().unwrap_or_default();
    let requested = cluster_ips(svc).first().cloned().unwrap_or_default();
    let ip = allocate_ip(addresses, &requested, dry_run).map_err(|e| match e {
        IpError::Full => ApiError::Internal(format!(
            "failed to allocate a serviceIP: {}",
            IpError::Full.message()
        )),
        other => ApiError::invalid(
            "Service",
            "",
            name,
            vec![Cause::invalid(
                "spec.clusterIPs",
                json!(cluster_ips(svc)),
                format!("failed to allocate IP {requested}: {}", other.message()),
            )],
        ),
    })?;
    svc["spec"]["clusterIPs"] = json!([ip]);
    svc["spec"]["clusterIP"] = json!(ip);
    Ok(ip)
}

/// What `beginUpdate` does to `new`, an update of the stored Service `old`: the allocated
/// values a client left out put back, the cluster IP fields kept in step and unchanged,
/// the IP family fields, a cluster IP for an ExternalName Service that becomes another
/// type, and the node ports the new type needs, chosen against `taken`. The `IPAddress` of
/// an address taken here is written once the Service is ([`acquired`]).
///
/// # Errors
/// As [`allocate_create`], and the real server's 422 for a changed cluster IP.
pub(crate) fn prepare_update(old: &Value, new: &mut Value, taken: &Taken) -> Result<(), ApiError> {
    let name = new["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let invalid = |causes: Vec<Cause>| ApiError::invalid("Service", "", &name, causes);
    patch_allocated_values(new, old);
    normalize_cluster_ips(new, Some(old));
    init_ip_family_fields(new, Some(old)).map_err(invalid)?;
    let changed = cluster_ips_changed(new, old);
    if !changed.is_empty() {
        return Err(invalid(changed));
    }
    if service_type(old) == "ExternalName"
        && service_type(new) != "ExternalName"
        && !is_headless(new)
    {
        allocate_cluster_ip(&taken.addresses, new, taken.dry_run)?;
    }
    let mut used = taken.ports.clone();
    if matches!(service_type(new), "NodePort" | "LoadBalancer") {
        update_node_ports(new, old, &mut used, taken.dry_run).map_err(|e| e.into_api(&name))?;
    }
    if needs_health_check(new) && !needs_health_check(old) {
        allocate_health_check_port(new, &mut used, taken.dry_run)?;
    }
    Ok(())
}

/// The strategy's `dropTypeDependentFields` (its `PrepareForUpdate`): what the old type
/// needed and the new one does not goes, when the client left it as it was. The real
/// server's field manager has recorded the update before: the fields dropped stay owned.
pub(crate) fn drop_type_dependent_fields(new: &mut Value, old: &Value) {
    let same = |field: &str, new: &Value| old["spec"][field] == new["spec"][field];
    if service_type(old) != "ExternalName" && service_type(new) == "ExternalName" {
        if same("clusterIPs", new) {
            remove(&mut new["spec"], "clusterIP");
            remove(&mut new["spec"], "clusterIPs");
        }
        for field in ["ipFamilies", "ipFamilyPolicy"] {
            if same(field, new) {
                remove(&mut new["spec"], field);
            }
        }
    }
    if needs_node_ports(old)
        && !needs_node_ports(new)
        && node_ports_of(old) == node_ports_of(new)
        && let Some(list) = new["spec"]["ports"].as_array_mut()
    {
        for port in list {
            remove(port, "nodePort");
        }
    }
    if needs_health_check(old) && !needs_health_check(new) && same("healthCheckNodePort", new) {
        remove(&mut new["spec"], "healthCheckNodePort");
    }
    if service_type(old) == "LoadBalancer"
        && service_type(new) != "LoadBalancer"
        && same("allocateLoadBalancerNodePorts", new)
    {
        remove(&mut new["spec"], "allocateLoadBalancerNodePorts");
    }
    let externally_accessible = |s: &Value| {
        matches!(service_type(s), "NodePort" | "LoadBalancer")
            || (service_type(s) == "ClusterIP"
                && s["spec"]["externalIPs"]
                    .as_array()
                    .is_some_and(|ips| !ips.is_empty()))
    };
    if externally_accessible(old)
        && !externally_accessible(new)
        && same("externalTrafficPolicy", new)
    {
        remove(&mut new["spec"], "externalTrafficPolicy");
    }
}

/// `afterDelete` and the releases of an update: the addresses whose `IPAddress` objects
/// go, those of the cluster IPs `before` had and `after` (the Service now, `None` once
/// deleted) no longer has.
pub(crate) fn released(before: &Value, after: Option<&Value>) -> Vec<String> {
    let kept = after.map(cluster_ips).unwrap_or_default();
    cluster_ips(before)
        .into_iter()
        .filter(|ip| ip != "None" && !ip.is_empty() && !kept.contains(ip))
        .collect()
}

/// The addresses whose `IPAddress` objects an update writes: the cluster IPs `after` has
/// and `before` had not (an ExternalName Service given one).
pub(crate) fn acquired(before: &Value, after: &Value) -> Vec<String> {
    let had = cluster_ips(before);
    cluster_ips(after)
        .into_iter()
        .filter(|ip| ip != "None" && !ip.is_empty() && !had.contains(ip))
        .collect()
}

/// Whether the `IPAddress` object `address` belongs to the Service `service`.
pub(crate) fn owns(service: &Value, address: &Value) -> bool {
    let parent = &address["spec"]["parentRef"];
    parent["resource"] == "services"
        && parent["namespace"] == service["metadata"]["namespace"]
        && parent["name"] == service["metadata"]["name"]
}

/// `normalizeClusterIPs`: the plural field follows the singular one a client set alone.
fn normalize_cluster_ips(new: &mut Value, old: Option<&Value>) {
    let singular = new["spec"]["clusterIP"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let Some(old) = old else {
        if !singular.is_empty() && cluster_ips(new).is_empty() {
            new["spec"]["clusterIPs"] = json!([singular]);
        }
        return;
    };
    let old_singular = old["spec"]["clusterIP"].as_str().unwrap_or_default();
    if !cluster_ips(old).is_empty() && cluster_ips(new).is_empty() && old_singular == singular {
        new["spec"]["clusterIPs"] = old["spec"]["clusterIPs"].clone();
    }
    if old_singular != singular {
        let same_plural = cluster_ips(old) == cluster_ips(new);
        if !old_singular.is_empty() && singular.is_empty() {
            if same_plural {
                remove(&mut new["spec"], "clusterIPs");
            }
        } else if same_plural {
            new["spec"]["clusterIPs"] = json!([singular]);
        }
    }
}

/// `patchAllocatedValues`: what was allocated stays when the client leaves it out.
fn patch_allocated_values(new: &mut Value, old: &Value) {
    let needs_cluster_ip = |s: &Value| service_type(s) != "ExternalName";
    if needs_cluster_ip(old) && needs_cluster_ip(new) {
        if new["spec"]["clusterIP"].as_str().is_none_or(str::is_empty)
            && old["spec"]["clusterIP"].is_string()
        {
            new["spec"]["clusterIP"] = old["spec"]["clusterIP"].clone();
        }
        if cluster_ips(new).is_empty() && !cluster_ips(old).is_empty() {
            new["spec"]["clusterIPs"] = old["spec"]["clusterIPs"].clone();
        }
    }
    if needs_node_ports(old) && needs_node_ports(new) {
        let in_new: BTreeSet<i64> = node_ports_of(new).into_iter().collect();
        let in_both: BTreeSet<i64> = node_ports_of(old)
            .into_iter()
            .filter(|p| in_new.contains(p))
            .collect();
        let by_name: std::collections::HashMap<String, i64> = ports(old)
            .iter()
            .map(|p| {
                (
                    p["name"].as_str().unwrap_or_default().to_string(),
                    p["nodePort"].as_i64().unwrap_or(0),
                )
            })
            .collect();
        if let Some(list) = new["spec"]["ports"].as_array_mut() {
            for port in list {
                if port["nodePort"].as_i64().unwrap_or(0) == 0 {
                    let previous = by_name
                        .get(port["name"].as_str().unwrap_or_default())
                        .copied()
                        .unwrap_or(0);
                    if !in_both.contains(&previous) && previous != 0 {
                        port["nodePort"] = json!(previous);
                    }
                }
            }
        }
    }
    if needs_health_check(old)
        && needs_health_check(new)
        && new["spec"]["healthCheckNodePort"].as_i64().unwrap_or(0) == 0
    {
        new["spec"]["healthCheckNodePort"] = old["spec"]["healthCheckNodePort"].clone();
    }
}

/// `initIPFamilyFields` on a single-stack IPv4 cluster: the causes of a refusal.
fn init_ip_family_fields(svc: &mut Value, old: Option<&Value>) -> Result<(), Vec<Cause>> {
    if service_type(svc) == "ExternalName" {
        return Ok(());
    }
    if svc["spec"]["ipFamilyPolicy"]
        .as_str()
        .is_none_or(str::is_empty)
    {
        let policy = match old.map(|o| &o["spec"]["ipFamilyPolicy"]) {
            Some(Value::String(p)) if !p.is_empty() => p.clone(),
            _ if svc["spec"]["clusterIP"] == "None" && !has_selector(svc) => {
                "RequireDualStack".into()
            }
            _ => "SingleStack".into(),
        };
        svc["spec"]["ipFamilyPolicy"] = json!(policy);
    }
    let policy = svc["spec"]["ipFamilyPolicy"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let ips = cluster_ips(svc);
    let mut families: Vec<String> = svc["spec"]["ipFamilies"]
        .as_array()
        .map(|f| {
            f.iter()
                .map(|x| x.as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default();
    let mut causes = Vec::new();
    if policy == "SingleStack" {
        if ips.len() == 2 {
            causes.push(Cause::invalid(
                "spec.ipFamilyPolicy",
                json!(policy),
                "must be 'RequireDualStack' or 'PreferDualStack' when multiple cluster IPs are specified",
            ));
        }
        if families.len() == 2 {
            causes.push(Cause::invalid(
                "spec.ipFamilyPolicy",
                json!(policy),
                "must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified",
            ));
        }
    }
    for (i, ip) in ips.iter().enumerate() {
        if ip == "None" {
            break;
        }
        let family = if ip.contains(':') { "IPv6" } else { "IPv4" };
        if i >= families.len() {
            if family == "IPv4" {
                families.push(family.into());
            } else {
                causes.push(Cause::invalid(
                    &format!("spec.clusterIPs[{i}]"),
                    json!(ips),
                    format!("{family} is not configured on this cluster"),
                ));
            }
        }
    }
    if !causes.is_empty() {
        return Err(causes);
    }
    if svc["spec"]["clusterIP"] == "None" && !has_selector(svc) {
        if families.is_empty() {
            families.push("IPv4".into());
        }
        if families.len() < 2 && policy != "SingleStack" {
            let other = if families[0] == "IPv4" {
                "IPv6"
            } else {
                "IPv4"
            };
            families.push(other.into());
        }
        svc["spec"]["ipFamilies"] = json!(families);
        return Ok(());
    }
    if policy == "RequireDualStack" {
        causes.push(Cause::invalid(
            "spec.ipFamilyPolicy",
            json!(policy),
            "this cluster is not configured for dual-stack services",
        ));
    }
    for (i, family) in families.iter().enumerate() {
        if family != "IPv4" {
            causes.push(Cause::invalid(
                &format!("spec.ipFamilies[{i}]"),
                json!(family),
                "not configured on this cluster",
            ));
        }
    }
    if !causes.is_empty() {
        return Err(causes);
    }
    if families.is_empty() {
        families.push("IPv4".into());
    }
    svc["spec"]["ipFamilies"] = json!(families);
    Ok(())
}

/// `validateUpgradeDowngradeClusterIPs` on a single-stack cluster: a cluster IP, once set,
/// stays (unless the Service is or becomes ExternalName or stays headless).
fn cluster_ips_changed(new: &Value, old: &Value) -> Vec<Cause> {
    if service_type(old) == "ExternalName" || service_type(new) == "ExternalName" {
        return Vec::new();
    }
    if is_headless(old) && is_headless(new) {
        return Vec::new();
    }
    let (before, after) = (cluster_ips(old), cluster_ips(new));
    let mut causes = Vec::new();
    let changed = |at: usize| {
        Cause::invalid(
            &format!("spec.clusterIPs[{at}]"),
            json!(after),
            "may not change once set",
        )
    };
    if before.len() == after.len() {
        for (i, ip) in before.iter().enumerate() {
            if *ip != after[i] {
                causes.push(changed(i));
            }
        }
    } else if before.len() > after.len() {
        if after.is_empty() {
            causes.push(Cause::invalid(
                "spec.clusterIPs[0]",
                json!(after),
                "primary clusterIP can not be unset",
            ));
        } else if before[0] != after[0] {
            causes.push(changed(0));
        }
    } else if !before.is_empty() && before[0] != after[0] {
        causes.push(changed(0));
    }
    causes
}

/// Why an address could not be taken (the allocators' errors).
#[derive(Debug, PartialEq)]
enum IpError {
    Full,
    Allocated,
    Mismatched,
    Unparsable,
}

impl IpError {
    fn message(&self) -> String {
        match self {
            IpError::Full => "range is full".into(),
            IpError::Allocated => "provided IP is already allocated".into(),
            IpError::Mismatched => "the provided network does not match the current range".into(),
            IpError::Unparsable => "failed to parse service IP".into(),
        }
    }
}

/// Takes `requested` (or, when empty, a random free address) from the range.
fn allocate_ip(
    addresses: &BTreeSet<String>,
    requested: &str,
    dry_run: bool,
) -> Result<String, IpError> {
    if !requested.is_empty() {
        let ip: Ipv4Addr = requested.parse().map_err(|_| IpError::Unparsable)?;
        // The ServiceCIDR's prefix holds neither its network nor its broadcast address.
        if ip < FIRST || ip > LAST {
            return Err(IpError::Mismatched);
        }
        if dry_run {
            return Ok(requested.to_string());
        }
        if addresses.contains(requested) {
            return Err(IpError::Allocated);
        }
        return Ok(requested.to_string());
    }
    if dry_run {
        return Ok(NETWORK.to_string());
    }
    let taken = |ip: Ipv4Addr| addresses.contains(&ip.to_string());
    let first = u32::from(FIRST);
    let upper = (first + IP_OFFSET, u32::from(LAST));
    let lower = (first, first + IP_OFFSET - 1);
    [upper, lower]
        .into_iter()
        .find_map(|range| free_in(range, |n| taken(Ipv4Addr::from(n))))
        .map(|n| Ipv4Addr::from(n).to_string())
        .ok_or(IpError::Full)
}

/// A free number of `first..=last` (`taken` says which are not), scanning from a random
/// start and wrapping, as the allocators' iterators do.
fn free_in<N>((first, last): (N, N), taken: impl Fn(N) -> bool) -> Option<N>
where
    N: Copy + Into<i64> + TryFrom<i64>,
{
    let (lo, hi) = (first.into(), last.into());
    if hi < lo {
        return None;
    }
    let size = hi - lo + 1;
    let start = rand::rng().random_range(0..size);
    (0..size)
        .map(|k| lo + (start + k) % size)
        .filter_map(|n| N::try_from(n).ok())
        .find(|n| !taken(*n))
}

/// Why a node port could not be taken, and where.
enum PortError {
    /// A requested port: the field, the port, the allocator's message.
    Requested(String, i64, String),
    Full,
}

impl PortError {
    fn into_api(self, name: &str) -> ApiError {
        match self {
            PortError::Requested(field, port, message) => ApiError::invalid(
                "Service",
                "",
                name,
                vec![Cause::invalid(&field, json!(port), message)],
            ),
            PortError::Full => {
                ApiError::Internal("failed to allocate a nodePort: range is full".into())
            }
        }
    }
}

/// Takes the requested `port`, or says why not.
fn take_port(used: &mut BTreeSet<i64>, port: i64) -> Result<(), String> {
    if !(NODE_PORT_FIRST..=NODE_PORT_LAST).contains(&port) {
        return Err(format!(
            "provided port is not in the valid range. The range of valid ports is {NODE_PORT_FIRST}-{NODE_PORT_LAST}"
        ));
    }
    if !used.insert(port) {
        return Err("provided port is already allocated".into());
    }
    Ok(())
}

/// A random free node port.
/// A free node port, taken in `used`. A dry run takes none: it answers the port after the
/// last it answered, from 32769 on, as the dry-run port operation does.
fn next_port(used: &mut BTreeSet<i64>, dry_run: bool) -> Result<i64, PortError> {
    if dry_run {
        let port = used
            .range(DRY_RUN_FIRST_PORT..)
            .next_back()
            .map_or(DRY_RUN_FIRST_PORT, |last| last + 1);
        used.insert(port);
        return Ok(port);
    }
    let upper = (NODE_PORT_FIRST + NODE_PORT_OFFSET, NODE_PORT_LAST);
    let lower = (NODE_PORT_FIRST, NODE_PORT_FIRST + NODE_PORT_OFFSET - 1);
    let port = [upper, lower]
        .into_iter()
        .find_map(|range| free_in(range, |p: i64| used.contains(&p)))
        .ok_or(PortError::Full)?;
    used.insert(port);
    Ok(port)
}

/// `initNodePorts`: a node port for each service port of a new NodePort or LoadBalancer
/// Service, shared by service ports of the same number.
fn init_node_ports(
    svc: &mut Value,
    used: &mut BTreeSet<i64>,
    dry_run: bool,
) -> Result<(), PortError> {
    let allocate = needs_node_ports(svc);
    let list = ports(svc);
    let mut by_port = std::collections::HashMap::<i64, i64>::new();
    let mut out = list.clone();
    for (i, port) in list.iter().enumerate() {
        let requested = port["nodePort"].as_i64().unwrap_or(0);
        if requested == 0 && !allocate {
            continue;
        }
        let number = port["port"].as_i64().unwrap_or(0);
        let field = format!("spec.ports[{i}].nodePort");
        match by_port.get(&number).copied() {
            None => {
                let wanted = list
                    .iter()
                    .find(|p| p["port"] == number && p["nodePort"].as_i64().unwrap_or(0) != 0)
                    .and_then(|p| p["nodePort"].as_i64())
                    .unwrap_or(0);
                let node_port = if wanted != 0 {
                    take_port(used, wanted)
                        .map_err(|m| PortError::Requested(field.clone(), wanted, m))?;
                    wanted
                } else {
                    next_port(used, dry_run)?
                };
                out[i]["nodePort"] = json!(node_port);
                by_port.insert(number, node_port);
            }
            Some(shared) if requested != shared => {
                if requested == 0 {
                    out[i]["nodePort"] = json!(shared);
                } else {
                    take_port(used, requested)
                        .map_err(|m| PortError::Requested(field, requested, m))?;
                }
            }
            Some(_) => {}
        }
    }
    svc["spec"]["ports"] = json!(out);
    Ok(())
}

/// `updateNodePorts`: ports kept from `old` stay, new requests are checked, missing ones
/// allocated.
fn update_node_ports(
    new: &mut Value,
    old: &Value,
    used: &mut BTreeSet<i64>,
    dry_run: bool,
) -> Result<(), PortError> {
    let allocate = needs_node_ports(new);
    let before = node_ports_of(old);
    let mut list = ports(new);
    let mut taken_now = BTreeSet::new();
    for (i, port) in list.iter_mut().enumerate() {
        let requested = port["nodePort"].as_i64().unwrap_or(0);
        if requested == 0 && !allocate {
            continue;
        }
        if requested != 0 {
            if !before.contains(&requested) && !taken_now.contains(&requested) {
                take_port(used, requested).map_err(|m| {
                    PortError::Requested(format!("spec.ports[{i}].nodePort"), requested, m)
                })?;
                taken_now.insert(requested);
            }
        } else {
            port["nodePort"] = json!(next_port(used, dry_run)?);
        }
    }
    new["spec"]["ports"] = json!(list);
    Ok(())
}

fn allocate_health_check_port(
    svc: &mut Value,
    used: &mut BTreeSet<i64>,
    dry_run: bool,
) -> Result<(), ApiError> {
    let requested = svc["spec"]["healthCheckNodePort"].as_i64().unwrap_or(0);
    if requested != 0 {
        take_port(used, requested).map_err(|m| {
            ApiError::Internal(format!(
                "failed to allocate requested HealthCheck NodePort {requested}: {m}"
            ))
        })?;
    } else {
        let port = next_port(used, dry_run).map_err(|_| {
            ApiError::Internal("failed to allocate a HealthCheck NodePort 0: range is full".into())
        })?;
        svc["spec"]["healthCheckNodePort"] = json!(port);
    }
    Ok(())
}

fn remove(map: &mut Value, key: &str) {
    if let Some(m) = map.as_object_mut() {
        m.remove(key);
    }
}

/// The causes of a Service beyond its metadata (`validateService`'s checks of ports and
/// type that operators' Services most often fail).
pub(crate) fn validate(svc: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let kind = service_type(svc);
    let list = ports(svc);
    if list.is_empty() && !is_headless(svc) && kind != "ExternalName" {
        causes.push(Cause::required("spec.ports", ""));
    }
    match kind {
        "LoadBalancer" | "NodePort" if is_headless(svc) => causes.push(Cause::invalid(
            "spec.clusterIPs[0]",
            json!("None"),
            format!("may not be set to 'None' for {kind} services"),
        )),
        "ExternalName"
            if svc["spec"]["externalName"]
                .as_str()
                .is_none_or(str::is_empty) =>
        {
            causes.push(Cause::required("spec.externalName", ""));
        }
        _ => {}
    }
    let singular = svc["spec"]["clusterIP"].as_str().unwrap_or_default();
    let plural = cluster_ips(svc);
    if singular.is_empty() && !plural.is_empty() {
        causes.push(Cause::invalid(
            "spec.clusterIPs",
            json!(plural),
            "must be empty when `clusterIP` is not specified",
        ));
    }
    let require_name = list.len() > 1;
    let mut names = BTreeSet::new();
    for (i, port) in list.iter().enumerate() {
        let at = format!("spec.ports[{i}]");
        let name = port["name"].as_str().unwrap_or_default();
        if require_name && name.is_empty() {
            causes.push(Cause::required(&format!("{at}.name"), ""));
        } else if !name.is_empty() && !names.insert(name.to_string()) {
            causes.push(Cause::duplicate(&format!("{at}.name"), json!(name)));
        }
        let number = port["port"].as_i64().unwrap_or(0);
        if !(1..=65535).contains(&number) {
            causes.push(Cause::invalid(
                &format!("{at}.port"),
                json!(number),
                "must be between 1 and 65535, inclusive",
            ));
        }
        if let Some(target) = port["targetPort"].as_i64()
            && !(1..=65535).contains(&target)
        {
            causes.push(Cause::invalid(
                &format!("{at}.targetPort"),
                json!(target),
                "must be between 1 and 65535, inclusive",
            ));
        }
        if kind == "ClusterIP" && port["nodePort"].as_i64().unwrap_or(0) != 0 {
            causes.push(Cause::forbidden(
                &format!("{at}.nodePort"),
                "may not be used when `type` is 'ClusterIP'",
            ));
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "web", "namespace": "default"}, "spec": spec})
    }

    #[test]
    fn a_new_service_gets_a_single_stack_ipv4_address_from_the_upper_part_of_the_range() {
        let mut taken = Taken::default();
        let mut svc = service(json!({"type": "ClusterIP", "ports": [{"port": 80}]}));
        let allocated = allocate_create(&mut taken, &mut svc, false).unwrap();
        let ip: Ipv4Addr = svc["spec"]["clusterIP"].as_str().unwrap().parse().unwrap();
        assert!(ip >= Ipv4Addr::new(10, 0, 0, 17) && ip <= LAST, "{ip}");
        assert_eq!(svc["spec"]["clusterIPs"], json!([ip.to_string()]));
        assert_eq!(svc["spec"]["ipFamilies"], json!(["IPv4"]));
        assert_eq!(svc["spec"]["ipFamilyPolicy"], "SingleStack");
        assert_eq!(allocated.addresses, vec![ip.to_string()]);
    }

    #[test]
    fn a_requested_address_outside_the_range_is_refused_with_the_allocators_message() {
        let mut taken = Taken::default();
        let mut svc = service(json!({"clusterIP": "10.0.0.255", "ports": [{"port": 80}]}));
        let err = allocate_create(&mut taken, &mut svc, false).unwrap_err();
        assert!(
            format!("{err:?}").contains("does not match the current range"),
            "{err:?}"
        );
        let mut svc = service(json!({"clusterIP": "10.9.0.1", "ports": [{"port": 80}]}));
        let err = allocate_create(&mut taken, &mut svc, false).unwrap_err();
        assert!(
            format!("{err:?}").contains("does not match the current range"),
            "{err:?}"
        );
    }

    #[test]
    fn dual_stack_is_refused_on_this_single_stack_cluster() {
        let mut taken = Taken::default();
        let mut svc = service(
            json!({"ipFamilyPolicy": "RequireDualStack", "selector": {"a": "b"},
                                     "ports": [{"port": 80}]}),
        );
        let err = allocate_create(&mut taken, &mut svc, false).unwrap_err();
        assert!(format!("{err:?}").contains("not configured for dual-stack"));
    }

    #[test]
    fn a_headless_service_without_a_selector_defaults_to_both_families_and_no_address() {
        let mut taken = Taken::default();
        let mut svc = service(json!({"clusterIP": "None"}));
        let allocated = allocate_create(&mut taken, &mut svc, false).unwrap();
        assert_eq!(svc["spec"]["ipFamilyPolicy"], "RequireDualStack");
        assert_eq!(svc["spec"]["ipFamilies"], json!(["IPv4", "IPv6"]));
        assert_eq!(svc["spec"]["clusterIPs"], json!(["None"]));
        assert!(allocated.addresses.is_empty());
    }

    #[test]
    fn ports_of_the_same_number_share_one_node_port_and_a_taken_one_is_refused() {
        let mut used = BTreeSet::from([30500]);
        let mut svc = service(json!({"type": "NodePort", "ports": [
            {"name": "tcp", "port": 53, "protocol": "TCP"},
            {"name": "udp", "port": 53, "protocol": "UDP"}]}));
        init_node_ports(&mut svc, &mut used, false).ok().unwrap();
        let ports = svc["spec"]["ports"].as_array().unwrap();
        let first = ports[0]["nodePort"].as_i64().unwrap();
        assert!((30086..=32767).contains(&first), "{first}");
        assert_eq!(ports[1]["nodePort"], first);
        let mut svc =
            service(json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30500}]}));
        match init_node_ports(&mut svc, &mut used, false) {
            Err(PortError::Requested(field, 30500, message)) => {
                assert_eq!(field, "spec.ports[0].nodePort");
                assert_eq!(message, "provided port is already allocated");
            }
            _ => panic!("a taken port was given"),
        }
    }

    #[test]
    fn an_update_that_leaves_out_the_allocated_values_keeps_them_and_a_change_is_refused() {
        let old = service(json!({"type": "NodePort", "clusterIP": "10.0.0.40",
            "clusterIPs": ["10.0.0.40"], "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
            "ports": [{"name": "http", "port": 80, "nodePort": 31000}]}));
        let mut new = service(json!({"type": "NodePort", "ports": [{"name": "http", "port": 80}]}));
        prepare_update(&old, &mut new, &Taken::default()).unwrap();
        drop_type_dependent_fields(&mut new, &old);
        assert_eq!(new["spec"]["clusterIPs"], json!(["10.0.0.40"]));
        assert_eq!(new["spec"]["ports"][0]["nodePort"], 31000);
        let mut changed = old.clone();
        changed["spec"]["clusterIP"] = json!("10.0.0.41");
        changed["spec"]["clusterIPs"] = json!(["10.0.0.41"]);
        let err = prepare_update(&old, &mut changed, &Taken::default()).unwrap_err();
        assert!(format!("{err:?}").contains("may not change once set"));
    }

    #[test]
    fn a_clusterip_service_with_two_unnamed_ports_is_invalid() {
        let svc = service(json!({"type": "ClusterIP",
            "ports": [{"port": 80, "targetPort": 80}, {"port": 0, "targetPort": 0}]}));
        let causes: Vec<String> = validate(&svc).iter().map(ToString::to_string).collect();
        assert_eq!(
            causes,
            [
                "spec.ports[0].name: Required value",
                "spec.ports[1].name: Required value",
                "spec.ports[1].port: Invalid value: 0: must be between 1 and 65535, inclusive",
                "spec.ports[1].targetPort: Invalid value: 0: must be between 1 and 65535, inclusive",
            ]
        );
    }
}
