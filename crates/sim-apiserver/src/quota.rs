//! Resource quota as Kubernetes counts it: what one object uses (the quota evaluators of
//! `pkg/quota/v1/evaluator/core` and apiserver's generic object count), which quotas
//! match it, and the ResourceQuota admission plugin's check of a create or update against
//! the namespace's quotas (`CheckRequest` of apiserver's `admission/plugin/resourcequota`),
//! with its refusals' words. The controller that computes a quota's `status.used` sums
//! [`usage`] over a namespace's objects.
//!
//! - **pods:** `count/pods` always; while the pod is not terminal (nor past its deletion
//!   grace) also `pods`, `cpu`/`requests.cpu`, `memory`/`requests.memory`,
//!   `ephemeral-storage`, their `limits.*`, hugepages and extended `requests.*`: the
//!   containers' sum, at least the largest init container (sidecars added), plus the
//!   overhead; pod-level `spec.resources` when set. A quota tracking cpu or memory
//!   requires every container to state it (`must specify …`). Scopes (`Terminating`,
//!   `NotTerminating`, `BestEffort`, `NotBestEffort`, `PriorityClass`,
//!   `CrossNamespacePodAffinity`) and scope selectors choose the pods a quota counts. A
//!   pod's update is charged only when it moves the pod in or out of `Terminating`.
//! - **services:** `services`, `services.loadbalancers`, `services.nodeports`.
//! - **persistentvolumeclaims:** `persistentvolumeclaims`, `requests.storage` (the larger of
//!   the request and `status.allocatedResources`), and both per storage class
//!   (`<class>.storageclass.storage.k8s.io/…`); the `VolumeAttributesClass` scope selector
//!   chooses the claims a quota counts by the classes each refers to. A status write that
//!   changes those or the allocated storage is charged, never refused.
//! - **configmaps, secrets, replicationcontrollers, resourcequotas:** their legacy names.
//! - **every resource:** `count/<resource>[.<group>]`, charged on create.
//!
//! # Caveats
//! - A pod's `resize` is handled as the real evaluator handles it, but this server does not
//!   serve the subresource.
//! - The admission configuration's `limitedResources` (none by default) is not read.

use std::collections::{BTreeMap, BTreeSet};

use std::time::SystemTime;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::quantity::Quantity;

/// Quantities by resource name.
pub type ResourceList = BTreeMap<String, Quantity>;

const STORAGE_CLASS_SUFFIX: &str = ".storageclass.storage.k8s.io/";

/// The resources quota tracks for pods (besides hugepages and extended resources).
const POD_RESOURCES: [&str; 11] = [
    "count/pods",
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
];

/// The resources whose absence from a container a quota on them refuses.
const MUST_SPECIFY: [&str; 6] = [
    "cpu",
    "memory",
    "requests.cpu",
    "requests.memory",
    "limits.cpu",
    "limits.memory",
];

/// The object count name of a resource: `count/<resource>[.<group>]`.
#[must_use]
pub fn object_count_name(group: &str, resource: &str) -> String {
    if group.is_empty() {
        format!("count/{resource}")
    } else {
        format!("count/{resource}.{group}")
    }
}

/// The legacy name core counts some resources under as well.
fn legacy_alias(group: &str, resource: &str) -> Option<&'static str> {
    match (group, resource) {
        ("", "configmaps") => Some("configmaps"),
        ("", "secrets") => Some("secrets"),
        ("", "replicationcontrollers") => Some("replicationcontrollers"),
        ("", "resourcequotas") => Some("resourcequotas"),
        _ => None,
    }
}

/// Of the names `hard` lists, those objects of `group`/`resource` are counted in.
#[must_use]
pub fn matching_resources(group: &str, resource: &str, hard: &[String]) -> Vec<String> {
    let count = object_count_name(group, resource);
    hard.iter()
        .filter(|name| match (group, resource) {
            ("", "pods") => {
                POD_RESOURCES.contains(&name.as_str())
                    || name.starts_with("hugepages-")
                    || name.starts_with("requests.hugepages-")
                    || is_extended_request(name)
            }
            ("", "services") => matches!(
                name.as_str(),
                "count/services" | "services" | "services.loadbalancers" | "services.nodeports"
            ),
            ("", "persistentvolumeclaims") => {
                matches!(
                    name.as_str(),
                    "count/persistentvolumeclaims" | "persistentvolumeclaims" | "requests.storage"
                ) || ["persistentvolumeclaims", "requests.storage"]
                    .iter()
                    .any(|r| name.ends_with(&format!("{STORAGE_CLASS_SUFFIX}{r}")))
            }
            _ => **name == count || legacy_alias(group, resource) == Some(name.as_str()),
        })
        .cloned()
        .collect()
}

/// `requests.<name>` of a resource that is not Kubernetes' own (`example.com/gpu`).
fn is_extended_request(name: &str) -> bool {
    name.strip_prefix("requests.")
        .is_some_and(|r| r.contains('/') && !r.contains("kubernetes.io/"))
}

/// Whether a write of `group`/`resource` at `subresource` is checked against quota (the
/// evaluators' `Handles`): `old` is the live object of an update, `None` for a create.
/// Every resource's create is; an update only where its usage can grow — a Service's or a
/// claim's, a claim's status whose allocated storage or volume attributes classes changed, a
/// pod moving in or out of the `Terminating` scope, a pod's `resize`.
#[must_use]
pub fn handles(
    group: &str,
    resource: &str,
    subresource: &str,
    object: &Value,
    old: Option<&Value>,
) -> bool {
    match (group, resource, subresource, old) {
        (_, _, "", None) => true,
        ("", "pods", "", Some(old)) => is_terminating(old) != is_terminating(object),
        ("", "pods", "resize", Some(_)) => true,
        ("", "services" | "persistentvolumeclaims", "", Some(_)) => true,
        ("", "persistentvolumeclaims", "status", Some(old)) => {
            claim_requires_replenish(object, old)
        }
        _ => false,
    }
}

/// Whether a pod is in the `Terminating` scope: it has an `activeDeadlineSeconds`.
#[must_use]
pub fn is_terminating(pod: &Value) -> bool {
    pod["spec"]["activeDeadlineSeconds"]
        .as_i64()
        .is_some_and(|s| s >= 0)
}

/// The VolumeAttributesClasses a claim refers to: the one it asks for, the one it has, and
/// the one it is being modified to.
fn volume_attributes_classes(claim: &Value) -> BTreeSet<&str> {
    [
        &claim["spec"]["volumeAttributesClassName"],
        &claim["status"]["currentVolumeAttributesClassName"],
        &claim["status"]["modifyVolumeStatus"]["targetVolumeAttributesClassName"],
    ]
    .into_iter()
    .filter_map(Value::as_str)
    .filter(|name| !name.is_empty())
    .collect()
}

/// `RequiresQuotaReplenish`: whether a claim's update changes what quota counts of it
/// beyond its spec — its allocated storage, or the VolumeAttributesClasses it refers to.
#[must_use]
pub fn claim_requires_replenish(claim: &Value, old: &Value) -> bool {
    let allocated = |c: &Value| quantity_at(&c["status"]["allocatedResources"]["storage"]);
    allocated(claim) != allocated(old)
        || volume_attributes_classes(claim) != volume_attributes_classes(old)
}

fn quantity_at(value: &Value) -> Option<Quantity> {
    value.as_str().and_then(|s| Quantity::parse(s).ok())
}

fn one() -> Quantity {
    Quantity::from_integer(1)
}

/// What one object of `group`/`resource` uses, as its evaluator measures it at `now`.
#[must_use]
pub fn usage(group: &str, resource: &str, object: &Value, now: SystemTime) -> ResourceList {
    let mut used = ResourceList::new();
    used.insert(object_count_name(group, resource), one());
    match (group, resource) {
        ("", "pods") => {
            if counts_compute(object, now) {
                add_all(&mut used, &pod_compute_usage(object));
            }
        }
        ("", "services") => {
            used.insert("services".into(), one());
            let ports = object["spec"]["ports"].as_array().map_or(0, Vec::len);
            let ports = Quantity::from_integer(i64::try_from(ports).unwrap_or(i64::MAX));
            let (mut balancers, mut node_ports) = (Quantity::zero(), Quantity::zero());
            match object["spec"]["type"].as_str() {
                Some("NodePort") => node_ports = ports,
                Some("LoadBalancer") => {
                    balancers = one();
                    node_ports = if object["spec"]["allocateLoadBalancerNodePorts"] == json!(false)
                    {
                        let explicit = object["spec"]["ports"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter(|p| p["nodePort"].as_i64().unwrap_or(0) != 0)
                            .count();
                        Quantity::from_integer(i64::try_from(explicit).unwrap_or(i64::MAX))
                    } else {
                        ports
                    };
                }
                _ => {}
            }
            used.insert("services.loadbalancers".into(), balancers);
            used.insert("services.nodeports".into(), node_ports);
        }
        ("", "persistentvolumeclaims") => {
            used.insert("persistentvolumeclaims".into(), one());
            let class = object["spec"]["storageClassName"]
                .as_str()
                .or_else(|| {
                    object["metadata"]["annotations"]["volume.beta.kubernetes.io/storage-class"]
                        .as_str()
                })
                .unwrap_or_default();
            if !class.is_empty() {
                used.insert(
                    format!("{class}{STORAGE_CLASS_SUFFIX}persistentvolumeclaims"),
                    one(),
                );
            }
            if let Some(mut storage) =
                quantity_at(&object["spec"]["resources"]["requests"]["storage"])
            {
                if let Some(allocated) =
                    quantity_at(&object["status"]["allocatedResources"]["storage"])
                    && allocated > storage
                {
                    storage = allocated;
                }
                let storage = storage.round_up_to_integer();
                used.insert("requests.storage".into(), storage);
                if !class.is_empty() {
                    used.insert(
                        format!("{class}{STORAGE_CLASS_SUFFIX}requests.storage"),
                        storage,
                    );
                }
            }
        }
        _ => {
            if let Some(alias) = legacy_alias(group, resource) {
                used.insert(alias.into(), one());
            }
        }
    }
    used
}

/// Whether a pod's compute resources are charged: not terminal, and not past the end of
/// its deletion's grace period.
fn counts_compute(pod: &Value, now: SystemTime) -> bool {
    if matches!(
        pod["status"]["phase"].as_str(),
        Some("Failed" | "Succeeded")
    ) {
        return false;
    }
    let deleted = pod["metadata"]["deletionTimestamp"]
        .as_str()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok());
    let grace = pod["metadata"]["deletionGracePeriodSeconds"].as_i64();
    match (deleted, grace) {
        (Some(at), Some(grace)) => {
            DateTime::<Utc>::from(now) <= at.with_timezone(&Utc) + chrono::Duration::seconds(grace)
        }
        _ => true,
    }
}

fn add_all(to: &mut ResourceList, from: &ResourceList) {
    for (name, q) in from {
        let sum = to.get(name).copied().unwrap_or_else(Quantity::zero) + *q;
        to.insert(name.clone(), sum);
    }
}

fn max_all(to: &mut ResourceList, from: &ResourceList) {
    for (name, q) in from {
        match to.get(name) {
            Some(have) if have >= q => {}
            _ => {
                to.insert(name.clone(), *q);
            }
        }
    }
}

/// A JSON map of quantities (those that parse).
#[must_use]
pub fn resource_list(value: &Value) -> ResourceList {
    value
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), quantity_at(v)?)))
        .collect()
}

/// The pod's requests or limits (`which`) as `resourcehelper.PodRequests`/`PodLimits` sum
/// them: the containers' sum, at least the largest init container's (with the sidecars
/// started before it), pod-level cpu and memory in place of the containers', and the
/// overhead when `overhead` (added to every request, and to the limits set).
#[must_use]
pub fn pod_resources(pod: &Value, which: &str, overhead: bool) -> ResourceList {
    let spec = &pod["spec"];
    let containers = |key: &str| spec[key].as_array().cloned().unwrap_or_default();
    let mut total = ResourceList::new();
    for c in containers("containers") {
        add_all(&mut total, &resource_list(&c["resources"][which]));
    }
    let mut sidecars = ResourceList::new();
    let mut init_max = ResourceList::new();
    for c in containers("initContainers") {
        let own = resource_list(&c["resources"][which]);
        let needed = if c["restartPolicy"] == "Always" {
            add_all(&mut total, &own);
            add_all(&mut sidecars, &own);
            sidecars.clone()
        } else {
            let mut needed = own;
            add_all(&mut needed, &sidecars);
            needed
        };
        max_all(&mut init_max, &needed);
    }
    max_all(&mut total, &init_max);
    // Pod-level resources replace the containers' for cpu and memory.
    for (name, q) in resource_list(&spec["resources"][which]) {
        if name == "cpu" || name == "memory" {
            total.insert(name, q);
        }
    }
    // The overhead adds to every request, and to the limits set.
    let overhead = if overhead {
        resource_list(&spec["overhead"])
    } else {
        ResourceList::new()
    };
    for (name, q) in overhead {
        match total.get(&name) {
            Some(have) => {
                let sum = *have + q;
                total.insert(name, sum);
            }
            None if which == "requests" => {
                total.insert(name, q);
            }
            None => {}
        }
    }
    total
}

/// `podComputeUsageHelper`: the quota names of a pod's (or container's) requests and limits.
fn compute_usage(requests: &ResourceList, limits: &ResourceList) -> ResourceList {
    let mut used = ResourceList::new();
    used.insert("pods".into(), one());
    for r in ["cpu", "memory", "ephemeral-storage"] {
        if let Some(q) = requests.get(r) {
            used.insert(r.into(), *q);
            used.insert(format!("requests.{r}"), *q);
        }
        if let Some(q) = limits.get(r) {
            used.insert(format!("limits.{r}"), *q);
        }
    }
    for (name, q) in requests {
        if name.starts_with("hugepages-") {
            used.insert(name.clone(), *q);
            used.insert(format!("requests.{name}"), *q);
        } else if name.contains('/') && !name.contains("kubernetes.io/") {
            used.insert(format!("requests.{name}"), *q);
        }
    }
    used
}

fn pod_compute_usage(pod: &Value) -> ResourceList {
    compute_usage(
        &pod_resources(pod, "requests", true),
        &pod_resources(pod, "limits", true),
    )
}

/// A quota's scope selectors: its `scopes` (as `Exists`) and `scopeSelector`'s expressions.
fn scope_selectors(quota: &Value) -> Vec<Value> {
    let mut selectors: Vec<Value> = quota["spec"]["scopes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| json!({"scopeName": s, "operator": "Exists"}))
        .collect();
    selectors.extend(
        quota["spec"]["scopeSelector"]["matchExpressions"]
            .as_array()
            .cloned()
            .unwrap_or_default(),
    );
    selectors
}

fn is_best_effort(pod: &Value) -> bool {
    let spec = &pod["spec"];
    let states_compute = |r: &Value| {
        ["requests", "limits"].iter().any(|w| {
            r[w].as_object().is_some_and(|m| {
                m.iter().any(|(k, v)| {
                    (k == "cpu" || k == "memory") && quantity_at(v).is_some_and(|q| !q.is_zero())
                })
            })
        })
    };
    let containers = ["containers", "initContainers"]
        .iter()
        .flat_map(|k| spec[k].as_array().cloned().unwrap_or_default());
    !states_compute(&spec["resources"])
        && !containers
            .into_iter()
            .any(|c| states_compute(&c["resources"]))
}

fn uses_cross_namespace_affinity(pod: &Value) -> bool {
    let affinity = &pod["spec"]["affinity"];
    ["podAffinity", "podAntiAffinity"].iter().any(|kind| {
        let a = &affinity[kind];
        let crosses = |t: &Value| {
            t["namespaces"].as_array().is_some_and(|n| !n.is_empty())
                || t.get("namespaceSelector").is_some_and(|s| !s.is_null())
        };
        a["requiredDuringSchedulingIgnoredDuringExecution"]
            .as_array()
            .into_iter()
            .flatten()
            .any(crosses)
            || a["preferredDuringSchedulingIgnoredDuringExecution"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|w| crosses(&w["podAffinityTerm"]))
    })
}

/// Whether a pod matches one scope selector requirement (`podMatchesScopeFunc`).
fn pod_matches_scope(pod: &Value, selector: &Value) -> bool {
    let terminating = is_terminating(pod);
    match selector["scopeName"].as_str().unwrap_or_default() {
        "Terminating" => terminating,
        "NotTerminating" => !terminating,
        "BestEffort" => is_best_effort(pod),
        "NotBestEffort" => !is_best_effort(pod),
        "CrossNamespacePodAffinity" => uses_cross_namespace_affinity(pod),
        "PriorityClass" => {
            let class = pod["spec"]["priorityClassName"]
                .as_str()
                .filter(|c| !c.is_empty());
            requirement_matches(selector, class)
        }
        _ => false,
    }
}

/// Whether a claim matches one scope selector requirement (`pvcMatchesScopeFunc`): only
/// `VolumeAttributesClass`, matched by any class the claim refers to.
fn claim_matches_scope(claim: &Value, selector: &Value) -> bool {
    if selector["scopeName"] != "VolumeAttributesClass" {
        return false;
    }
    let classes = volume_attributes_classes(claim);
    if classes.is_empty() {
        return requirement_matches(selector, None);
    }
    classes
        .into_iter()
        .any(|class| requirement_matches(selector, Some(class)))
}

/// Whether a scope selector requirement, read as a label selector on the scope's name,
/// matches an object whose value for it is `value` (`None`: the label is absent).
fn requirement_matches(selector: &Value, value: Option<&str>) -> bool {
    let listed = |v: &str| {
        selector["values"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|listed| listed == v)
    };
    match selector["operator"].as_str().unwrap_or_default() {
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "In" => value.is_some_and(listed),
        "NotIn" => !value.is_some_and(listed),
        _ => false,
    }
}

/// Whether an object of `group`/`resource` is in a quota's scope selector requirement:
/// pods and claims by their own scopes; no other object is in any scope.
fn matches_scope(group: &str, resource: &str, object: &Value, selector: &Value) -> bool {
    match (group, resource) {
        ("", "pods") => pod_matches_scope(object, selector),
        ("", "persistentvolumeclaims") => claim_matches_scope(object, selector),
        _ => false,
    }
}

/// The names a quota's `status.hard` lists.
#[must_use]
pub fn hard_names(quota: &Value, field: &str) -> Vec<String> {
    quota[field]["hard"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// Whether `quota` counts `object` (of `group`/`resource`): it limits one of the object's
/// resources, and the object is in all of its scopes.
#[must_use]
pub fn matches(quota: &Value, group: &str, resource: &str, object: &Value) -> bool {
    let hard = hard_names(quota, "status");
    quota_matches(quota, &hard, group, resource, object)
}

fn quota_matches(
    quota: &Value,
    hard: &[String],
    group: &str,
    resource: &str,
    object: &Value,
) -> bool {
    if matching_resources(group, resource, hard).is_empty() {
        return false;
    }
    scope_selectors(quota)
        .iter()
        .all(|s| matches_scope(group, resource, object, s))
}

/// What a quota `quota` (with `spec.hard` as its limits) uses of the objects of one
/// resource of its namespace: the controller's `UsageStats`, the resources of `hard` this
/// resource is counted in, each starting at zero.
#[must_use]
pub fn usage_of(
    quota: &Value,
    group: &str,
    resource: &str,
    objects: &[Value],
    now: SystemTime,
) -> ResourceList {
    let hard = hard_names(quota, "spec");
    let names = matching_resources(group, resource, &hard);
    let mut used: ResourceList = names
        .iter()
        .map(|n| (n.clone(), Quantity::zero()))
        .collect();
    if names.is_empty() {
        return used;
    }
    let selectors = scope_selectors(quota);
    for object in objects {
        if !selectors
            .iter()
            .all(|s| matches_scope(group, resource, object, s))
        {
            continue;
        }
        let own = usage(group, resource, object, now);
        for name in &names {
            if let Some(q) = own.get(name) {
                let sum = used[name] + *q;
                used.insert(name.clone(), sum);
            }
        }
    }
    used
}

/// A request the ResourceQuota admission plugin checks.
#[derive(Debug)]
pub struct Request<'a> {
    /// The API group.
    pub group: &'a str,
    /// The resource.
    pub resource: &'a str,
    /// The subresource written (`""` for the object itself).
    pub subresource: &'a str,
    /// The new object.
    pub object: &'a Value,
    /// The live object of an update (`None` for a create).
    pub old: Option<&'a Value>,
}

/// The quotas of a namespace as a request would leave them: their indexes in the list
/// given and their new `status.used`.
pub type Charged = Vec<(usize, ResourceList)>;

/// `CheckRequest`: whether `request` fits in `quotas` (the namespace's), and the usage it
/// would leave each quota it charges. Errors are the plugin's messages (the caller makes
/// them a 403 for the object).
///
/// # Errors
/// `failed quota: …`, `status unknown for quota: …`, `exceeded quota: …`.
pub fn check(quotas: &[Value], request: &Request<'_>, now: SystemTime) -> Result<Charged, String> {
    let Request {
        group,
        resource,
        subresource,
        object,
        old,
    } = *request;
    let pod = group.is_empty() && resource == "pods";
    let mut interesting = Vec::new();
    for (i, quota) in quotas.iter().enumerate() {
        let hard = hard_names(quota, "status");
        if !quota_matches(quota, &hard, group, resource, object) {
            continue;
        }
        let restricted = matching_resources(group, resource, &hard);
        let name = quota["metadata"]["name"].as_str().unwrap_or_default();
        if pod {
            pod_constraints(object, &restricted)
                .map_err(|e| format!("failed quota: {name}: {e}"))?;
        }
        let used = quota["status"]["used"].as_object();
        if restricted
            .iter()
            .any(|r| !used.is_some_and(|u| u.contains_key(r)))
        {
            let mut names = restricted.clone();
            names.sort();
            return Err(format!(
                "status unknown for quota: {name}, resources: {}",
                names.join(",")
            ));
        }
        interesting.push(i);
    }
    if interesting.is_empty() {
        return Ok(Vec::new());
    }
    let input = usage(group, resource, object, now);
    let negative: Vec<&str> = input
        .iter()
        .filter(|(_, q)| q.is_negative())
        .map(|(n, _)| n.as_str())
        .collect();
    if !negative.is_empty() {
        return Err(format!(
            "quota usage is negative for resource(s): {}",
            negative.join(",")
        ));
    }
    let mut deltas: BTreeMap<usize, ResourceList> =
        interesting.iter().map(|&i| (i, input.clone())).collect();
    if let Some(old) = old.filter(|o| o["metadata"]["resourceVersion"].is_string()) {
        let previous = usage(group, resource, old, now);
        let delta: ResourceList = input
            .iter()
            .map(|(n, q)| {
                let d = *q - previous.get(n).copied().unwrap_or_else(Quantity::zero);
                (
                    n.clone(),
                    if d.is_negative() { Quantity::zero() } else { d },
                )
            })
            .collect();
        for &i in &interesting {
            if matches(&quotas[i], group, resource, old) {
                deltas.insert(i, delta.clone());
            }
        }
    }
    deltas.retain(|_, d| {
        d.retain(|_, q| !q.is_zero());
        !d.is_empty()
    });
    let mut charged = Vec::new();
    for (i, delta) in deltas {
        let quota = &quotas[i];
        let hard = resource_list(&quota["status"]["hard"]);
        let used = resource_list(&quota["status"]["used"]);
        let requested: ResourceList = delta
            .into_iter()
            .filter(|(n, _)| hard.contains_key(n))
            .collect();
        let mut new_used = used.clone();
        add_all(&mut new_used, &requested);
        let exceeded: BTreeSet<&String> = requested
            .keys()
            .filter(|n| new_used[*n] > hard[*n])
            .collect();
        // A status write is charged, never refused.
        let exceeded = if subresource == "status" {
            BTreeSet::new()
        } else {
            exceeded
        };
        if !exceeded.is_empty() {
            let print = |list: &ResourceList| {
                exceeded
                    .iter()
                    .filter_map(|n| list.get(*n).map(|q| format!("{n}={q}")))
                    .collect::<Vec<_>>()
                    .join(",")
            };
            return Err(format!(
                "exceeded quota: {}, requested: {}, used: {}, limited: {}",
                quota["metadata"]["name"].as_str().unwrap_or_default(),
                print(&requested),
                print(&used),
                print(&hard)
            ));
        }
        charged.push((i, new_used));
    }
    Ok(charged)
}

/// A pod's constraints under a quota restricting `restricted`: each container states the
/// cpu and memory requests and limits the quota tracks.
fn pod_constraints(pod: &Value, restricted: &[String]) -> Result<(), String> {
    let spec = &pod["spec"];
    let pod_level = ["requests", "limits"].iter().any(|w| {
        spec["resources"][w]
            .as_object()
            .is_some_and(|m| !m.is_empty())
    });
    if pod_level {
        return Ok(());
    }
    let required: BTreeSet<&str> = restricted
        .iter()
        .map(String::as_str)
        .filter(|r| MUST_SPECIFY.contains(r))
        .collect();
    let mut missing: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for key in ["containers", "initContainers"] {
        for c in spec[key].as_array().into_iter().flatten() {
            let own = compute_usage(
                &resource_list(&c["resources"]["requests"]),
                &resource_list(&c["resources"]["limits"]),
            );
            for r in &required {
                if !own.contains_key(*r) {
                    missing
                        .entry(r)
                        .or_default()
                        .insert(c["name"].as_str().unwrap_or_default().to_string());
                }
            }
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    let parts: Vec<String> = missing
        .iter()
        .map(|(r, names)| {
            format!(
                "{r} for: {}",
                names.iter().cloned().collect::<Vec<_>>().join(",")
            )
        })
        .collect();
    Err(format!("must specify {}", parts.join("; ")))
}

/// A quota's `status.used` written as JSON.
#[must_use]
pub fn to_json(list: &ResourceList) -> Value {
    Value::Object(
        list.iter()
            .map(|(n, q)| (n.clone(), json!(q.to_string())))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> SystemTime {
        SystemTime::now()
    }

    fn printed(list: &ResourceList) -> Value {
        to_json(list)
    }

    fn quota(hard: Value, used: Value) -> Value {
        json!({"metadata": {"name": "q", "resourceVersion": "1"},
               "spec": {"hard": hard.clone()}, "status": {"hard": hard, "used": used}})
    }

    #[test]
    fn a_pod_uses_its_containers_sum_at_least_its_largest_init_container_plus_overhead() {
        let pod = json!({"spec": {
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "200m"}, "limits": {"memory": "1Gi"}}}],
            "initContainers": [
                {"name": "setup", "resources": {"requests": {"cpu": "1"}}},
                {"name": "sidecar", "restartPolicy": "Always",
                 "resources": {"requests": {"memory": "32Mi"}}}],
            "overhead": {"cpu": "10m"}}});
        let used = usage("", "pods", &pod, now());
        assert_eq!(
            printed(&used),
            json!({"count/pods": "1", "pods": "1", "cpu": "1010m", "requests.cpu": "1010m",
                   "memory": "96Mi", "requests.memory": "96Mi", "limits.memory": "1Gi"})
        );
        let done = json!({"spec": pod["spec"], "status": {"phase": "Succeeded"}});
        assert_eq!(
            printed(&usage("", "pods", &done, now())),
            json!({"count/pods": "1"})
        );
    }

    #[test]
    fn a_quota_on_cpu_refuses_a_container_that_does_not_state_it_and_a_pod_over_the_limit() {
        let quotas = [quota(
            json!({"pods": "2", "requests.cpu": "1"}),
            json!({"pods": "1", "requests.cpu": "600m"}),
        )];
        let bare = json!({"metadata": {"name": "p"},
                          "spec": {"containers": [{"name": "main"}, {"name": "side"}]}});
        let request = Request {
            group: "",
            resource: "pods",
            subresource: "",
            object: &bare,
            old: None,
        };
        assert_eq!(
            check(&quotas, &request, now()).unwrap_err(),
            "failed quota: q: must specify requests.cpu for: main,side"
        );
        let big = json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "main", "resources": {"requests": {"cpu": "500m"}}}]}});
        let request = Request {
            group: "",
            resource: "pods",
            subresource: "",
            object: &big,
            old: None,
        };
        assert_eq!(
            check(&quotas, &request, now()).unwrap_err(),
            "exceeded quota: q, requested: requests.cpu=500m, used: requests.cpu=600m, limited: requests.cpu=1"
        );
        let fits = json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "main", "resources": {"requests": {"cpu": "0.4"}}}]}});
        let request = Request {
            group: "",
            resource: "pods",
            subresource: "",
            object: &fits,
            old: None,
        };
        let charged = check(&quotas, &request, now()).unwrap();
        assert_eq!(charged.len(), 1);
        assert_eq!(
            printed(&charged[0].1),
            json!({"pods": "2", "requests.cpu": "1"})
        );
    }

    #[test]
    fn a_quota_not_yet_computed_refuses_and_one_of_other_resources_is_not_consulted() {
        let mut unknown = quota(json!({"configmaps": "1"}), json!({}));
        unknown["status"]["used"] = Value::Null;
        let cm = json!({"metadata": {"name": "c"}});
        let request = Request {
            group: "",
            resource: "configmaps",
            subresource: "",
            object: &cm,
            old: None,
        };
        assert_eq!(
            check(&[unknown], &request, now()).unwrap_err(),
            "status unknown for quota: q, resources: configmaps"
        );
        let other = quota(json!({"secrets": "0"}), json!({"secrets": "0"}));
        assert!(check(&[other], &request, now()).unwrap().is_empty());
    }

    #[test]
    fn scopes_choose_the_pods_a_quota_counts() {
        let mut best_effort = quota(json!({"pods": "1"}), json!({"pods": "0"}));
        best_effort["spec"]["scopes"] = json!(["BestEffort"]);
        let bare = json!({"spec": {"containers": [{"name": "main"}]}});
        let stated = json!({"spec": {"containers": [
            {"name": "main", "resources": {"requests": {"cpu": "1"}}}]}});
        assert!(matches(&best_effort, "", "pods", &bare));
        assert!(!matches(&best_effort, "", "pods", &stated));
        let mut by_class = quota(json!({"pods": "1"}), json!({"pods": "0"}));
        by_class["spec"]["scopeSelector"] = json!({"matchExpressions": [
            {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]});
        let high = json!({"spec": {"priorityClassName": "high", "containers": []}});
        assert!(matches(&by_class, "", "pods", &high));
        assert!(!matches(&by_class, "", "pods", &bare));
        let cm = json!({"metadata": {"name": "c"}});
        let mut scoped_counts = quota(json!({"configmaps": "1"}), json!({"configmaps": "0"}));
        scoped_counts["spec"]["scopes"] = json!(["NotTerminating"]);
        assert!(!matches(&scoped_counts, "", "configmaps", &cm));
    }

    #[test]
    fn a_pod_update_is_charged_only_when_it_moves_the_pod_in_or_out_of_terminating() {
        let running = json!({"spec": {"containers": [{"name": "main"}]}});
        let mut deadline = running.clone();
        deadline["spec"]["activeDeadlineSeconds"] = json!(60);
        assert!(handles("", "pods", "", &running, None));
        assert!(!handles("", "pods", "", &running, Some(&running)));
        assert!(handles("", "pods", "", &deadline, Some(&running)));
        assert!(handles("", "pods", "resize", &running, Some(&running)));
        assert!(!handles("", "pods", "status", &running, Some(&running)));
        assert!(!handles("", "configmaps", "", &running, Some(&running)));

        let mut terminating = quota(json!({"pods": "1"}), json!({"pods": "1"}));
        terminating["spec"]["scopes"] = json!(["Terminating"]);
        let mut old = running.clone();
        old["metadata"] = json!({"name": "p", "resourceVersion": "7"});
        deadline["metadata"] = old["metadata"].clone();
        let request = Request {
            group: "",
            resource: "pods",
            subresource: "",
            object: &deadline,
            old: Some(&old),
        };
        assert_eq!(
            check(&[terminating], &request, now()).unwrap_err(),
            "exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1"
        );
    }

    #[test]
    fn the_volume_attributes_class_scope_counts_claims_by_every_class_they_refer_to() {
        let mut gold = quota(
            json!({"persistentvolumeclaims": "1"}),
            json!({"persistentvolumeclaims": "0"}),
        );
        gold["spec"]["scopeSelector"] = json!({"matchExpressions": [
            {"scopeName": "VolumeAttributesClass", "operator": "In", "values": ["gold"]}]});
        let mut unclassed = gold.clone();
        unclassed["spec"]["scopeSelector"] = json!({"matchExpressions": [
            {"scopeName": "VolumeAttributesClass", "operator": "DoesNotExist"}]});
        let claim = |spec: &str, modifying: &str| {
            json!({"spec": {"volumeAttributesClassName": spec},
                   "status": {"modifyVolumeStatus": {"targetVolumeAttributesClassName": modifying}}})
        };
        let matches_claim = |q: &Value, c: &Value| matches(q, "", "persistentvolumeclaims", c);
        assert!(matches_claim(&gold, &claim("gold", "")));
        assert!(matches_claim(&gold, &claim("silver", "gold")));
        assert!(!matches_claim(&gold, &claim("silver", "")));
        assert!(matches_claim(&unclassed, &json!({"spec": {}})));
        assert!(!matches_claim(&unclassed, &claim("", "gold")));
        let pod = json!({"spec": {"containers": []}});
        assert!(!matches(&gold, "", "pods", &pod));
        assert!(claim_requires_replenish(
            &claim("gold", "silver"),
            &claim("gold", "")
        ));
        assert!(!claim_requires_replenish(
            &claim("gold", ""),
            &claim("gold", "")
        ));
    }

    #[test]
    fn services_count_their_node_ports_and_claims_their_storage_by_class() {
        let service =
            json!({"spec": {"type": "LoadBalancer", "ports": [{"port": 1}, {"port": 2}]}});
        assert_eq!(
            printed(&usage("", "services", &service, now())),
            json!({"count/services": "1", "services": "1",
                   "services.loadbalancers": "1", "services.nodeports": "2"})
        );
        let claim = json!({"spec": {"storageClassName": "fast",
                                    "resources": {"requests": {"storage": "1.5Gi"}}}});
        assert_eq!(
            printed(&usage("", "persistentvolumeclaims", &claim, now())),
            json!({"count/persistentvolumeclaims": "1", "persistentvolumeclaims": "1",
                   "requests.storage": "1536Mi",
                   "fast.storageclass.storage.k8s.io/persistentvolumeclaims": "1",
                   "fast.storageclass.storage.k8s.io/requests.storage": "1536Mi"})
        );
        let deployment = json!({"metadata": {"name": "d"}});
        assert_eq!(
            printed(&usage("apps", "deployments", &deployment, now())),
            json!({"count/deployments.apps": "1"})
        );
    }
}
