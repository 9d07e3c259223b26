//! Answers as `meta.k8s.io` Tables, the form `kubectl get` asks for (`Accept:
//! application/json;as=Table;v=v1;g=meta.k8s.io`), as kube-apiserver's table convertors
//! write them: the resource's column definitions, then a row per object with its cells and
//! the object (`includeObject`: `Metadata`, the default, as a `PartialObjectMetadata`;
//! `Object` whole; `None` left out). A single object is a Table of one row; a list keeps its
//! `resourceVersion`, `continue` and `remainingItemCount`; a watch event carries a Table of
//! one row, the first with the column definitions.
//!
//! The column definitions of the built-in resources are the real server's
//! (`system_objects/table_columns.json`, captured from kube-apiserver 1.34 and compared
//! with it by the differential test). The cells are those of kube-apiserver's printers
//! (`pkg/printers/internalversion`, always `Wide`), ported for the kinds operators and
//! their authors look at: pods, services, configmaps, secrets, serviceaccounts,
//! namespaces, nodes, events (`v1` and `events.k8s.io`), deployments, replicasets,
//! statefulsets, daemonsets, replicationcontrollers, podtemplates, controllerrevisions,
//! jobs, cronjobs, horizontalpodautoscalers, endpoints, endpointslices,
//! poddisruptionbudgets, resourcequotas, ingresses, ingressclasses, networkpolicies,
//! servicecidrs, ipaddresses, priorityclasses, runtimeclasses, rolebindings,
//! clusterrolebindings, webhook configurations, validatingadmissionpolicies and their
//! bindings, certificatesigningrequests, persistentvolumeclaims, persistentvolumes,
//! storageclasses, volumeattributesclasses, csidrivers, csinodes, volumeattachments,
//! flowschemas (a list in their order of precedence), prioritylevelconfigurations,
//! componentstatuses, leases, and the kinds served by the default convertor (`Name`,
//! `Created At`). A custom
//! resource gets its CRD version's `additionalPrinterColumns` (simple JSONPaths: fields
//! and list indexes), or `Age`.
//!
//! # Caveats
//! A built-in kind without a ported printer (apiservices, `resource.k8s.io`'s kinds) is
//! answered as JSON, which `kubectl get` (whose Accept header falls back to
//! `application/json`) prints with its own columns.

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

use super::registry::{Backing, ResourceType};
use super::status::ApiError;

/// The real server's column definitions by `group/resource`.
static COLUMNS: LazyLock<Map<String, Value>> = LazyLock::new(|| {
    serde_json::from_str(include_str!("system_objects/table_columns.json")).unwrap_or_default()
});

/// `metav1.ObjectMeta`'s description of `name`, the first column of every Table.
fn name_column() -> Value {
    COLUMNS
        .get("/configmaps")
        .and_then(|c| c.get(0))
        .cloned()
        .unwrap_or(Value::Null)
}

/// `metav1.ObjectMeta`'s description of `creationTimestamp`.
fn creation_description() -> Value {
    COLUMNS
        .get("/configmaps")
        .and_then(|c| c.get(2))
        .map(|c| c["description"].clone())
        .unwrap_or(Value::Null)
}

/// Whether the client's first acceptable type is a `meta.k8s.io` Table (`v1` or
/// `v1beta1`).
pub fn requested(accept: Option<&str>) -> bool {
    let Some(accept) = accept else {
        return false;
    };
    accept.split(',').next().is_some_and(|first| {
        let params: Vec<&str> = first.split(';').skip(1).map(str::trim).collect();
        params.contains(&"as=Table")
            && params.contains(&"g=meta.k8s.io")
            && (params.contains(&"v=v1") || params.contains(&"v=v1beta1"))
    })
}

/// What each row carries of its object (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Include {
    /// Nothing.
    None,
    /// A `PartialObjectMetadata` (the default).
    Metadata,
    /// The whole object.
    Object,
}

impl Include {
    /// Parses the `includeObject` query parameter.
    ///
    /// # Errors
    /// The real server's BadRequest for another value.
    pub fn parse(value: Option<&str>) -> Result<Self, ApiError> {
        match value.unwrap_or_default() {
            "" | "Metadata" => Ok(Include::Metadata),
            "Object" => Ok(Include::Object),
            "None" => Ok(Include::None),
            other => Err(ApiError::BadRequest(format!(
                "unrecognized includeObject value: {other:?}"
            ))),
        }
    }
}

/// How the objects of `rt` are printed, when they can be.
enum Printer {
    /// A built-in kind's printer and the real server's columns.
    BuiltIn(fn(&Value, DateTime<Utc>) -> Vec<Value>, Value),
    /// A custom resource's columns: the definitions and each one's JSONPath.
    Custom(Vec<Value>, Vec<String>),
}

fn printer(rt: &ResourceType, crd: Option<&Value>, version: &str) -> Option<Printer> {
    if let Backing::Custom { .. } = &rt.backing {
        return Some(custom_printer(crd.unwrap_or(&Value::Null), version));
    }
    let key = format!("{}/{}", rt.group, rt.resource);
    let columns = COLUMNS.get(&key)?.clone();
    let print: fn(&Value, DateTime<Utc>) -> Vec<Value> =
        match (rt.group.as_str(), rt.resource.as_str()) {
            ("", "pods") => print_pod,
            ("", "services") => print_service,
            ("", "configmaps") => |o, now| {
                let count = len(&o["data"]) + len(&o["binaryData"]);
                vec![name(o), json!(count), age(o, now)]
            },
            ("", "secrets") => |o, now| {
                vec![
                    name(o),
                    o["type"].clone(),
                    json!(len(&o["data"])),
                    age(o, now),
                ]
            },
            ("", "serviceaccounts") => {
                |o, now| vec![name(o), json!(len(&o["secrets"])), age(o, now)]
            }
            ("", "namespaces") => |o, now| vec![name(o), o["status"]["phase"].clone(), age(o, now)],
            ("apps", "deployments") => print_deployment,
            ("apps", "replicasets") => print_replica_set,
            ("apps", "statefulsets") => |o, now| {
                let (names, images) = containers(&o["spec"]["template"]);
                vec![
                    name(o),
                    json!(format!(
                        "{}/{}",
                        int(&o["status"]["readyReplicas"]),
                        int(&o["spec"]["replicas"])
                    )),
                    age(o, now),
                    json!(names),
                    json!(images),
                ]
            },
            ("", "persistentvolumeclaims") => print_claim,
            ("", "persistentvolumes") => print_volume,
            ("storage.k8s.io", "storageclasses") => print_storage_class,
            ("batch", "jobs") => print_job,
            ("batch", "cronjobs") => print_cron_job,
            ("apps", "daemonsets") => print_daemon_set,
            ("apps", "controllerrevisions") => print_controller_revision,
            ("", "endpoints") => |o, now| vec![name(o), json!(endpoints(o)), age(o, now)],
            ("policy", "poddisruptionbudgets") => |o, now| {
                let bound = |v: &Value| match v {
                    Value::Null => json!("N/A"),
                    Value::String(s) => json!(s),
                    other => json!(other.to_string()),
                };
                vec![
                    name(o),
                    bound(&o["spec"]["minAvailable"]),
                    bound(&o["spec"]["maxUnavailable"]),
                    json!(int(&o["status"]["disruptionsAllowed"])),
                    age(o, now),
                ]
            },
            ("networking.k8s.io", "ingresses") => print_ingress,
            ("networking.k8s.io", "networkpolicies") => |o, now| {
                vec![
                    name(o),
                    json!(label_selector(&o["spec"]["podSelector"])),
                    age(o, now),
                ]
            },
            ("scheduling.k8s.io", "priorityclasses") => |o, now| {
                vec![
                    name(o),
                    json!(int(&o["value"])),
                    json!(o["globalDefault"].as_bool().unwrap_or(false)),
                    age(o, now),
                    text_or(&o["preemptionPolicy"], ""),
                ]
            },
            ("coordination.k8s.io", "leases") => |o, now| {
                vec![
                    name(o),
                    json!(o["spec"]["holderIdentity"].as_str().unwrap_or_default()),
                    age(o, now),
                ]
            },
            ("", "nodes") => print_node,
            ("", "events") | ("events.k8s.io", "events") => print_event,
            ("discovery.k8s.io", "endpointslices") => print_endpoint_slice,
            ("autoscaling", "horizontalpodautoscalers") => print_autoscaler,
            ("", "replicationcontrollers") => {
                |o, now| replica_cells(o, now, format_labels(&o["spec"]["selector"]))
            }
            ("", "podtemplates") => |o, _| {
                let (names, images) = containers(&o["template"]);
                vec![
                    name(o),
                    json!(names),
                    json!(images),
                    json!(format_labels(&o["template"]["metadata"]["labels"])),
                ]
            },
            ("", "resourcequotas") => print_resource_quota,
            ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => {
                print_role_binding
            }
            (
                "admissionregistration.k8s.io",
                "mutatingwebhookconfigurations" | "validatingwebhookconfigurations",
            ) => |o, now| vec![name(o), json!(len(&o["webhooks"])), age(o, now)],
            ("admissionregistration.k8s.io", "validatingadmissionpolicies") => |o, now| {
                let param_kind = &o["spec"]["paramKind"];
                let param_kind = if param_kind.is_object() {
                    format!(
                        "{}/{}",
                        param_kind["apiVersion"].as_str().unwrap_or_default(),
                        param_kind["kind"].as_str().unwrap_or_default()
                    )
                } else {
                    "<unset>".into()
                };
                vec![
                    name(o),
                    json!(len(&o["spec"]["validations"])),
                    json!(param_kind),
                    age(o, now),
                ]
            },
            ("admissionregistration.k8s.io", "validatingadmissionpolicybindings") => {
                print_policy_binding
            }
            ("certificates.k8s.io", "certificatesigningrequests") => print_signing_request,
            ("networking.k8s.io", "ingressclasses") => |o, now| {
                let parameters = &o["spec"]["parameters"];
                let parameters = if parameters.is_object() {
                    let kind = parameters["kind"].as_str().unwrap_or_default();
                    let name = parameters["name"].as_str().unwrap_or_default();
                    match parameters["apiGroup"].as_str() {
                        Some(group) => format!("{kind}.{group}/{name}"),
                        None => format!("{kind}/{name}"),
                    }
                } else {
                    "<none>".into()
                };
                vec![
                    name(o),
                    text_or(&o["spec"]["controller"], ""),
                    json!(parameters),
                    age(o, now),
                ]
            },
            ("networking.k8s.io", "servicecidrs") => |o, now| {
                let cidrs: Vec<&str> = o["spec"]["cidrs"]
                    .as_array()
                    .map(|c| c.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                vec![name(o), json!(cidrs.join(",")), age(o, now)]
            },
            ("networking.k8s.io", "ipaddresses") => |o, now| {
                let parent = &o["spec"]["parentRef"];
                let parent = if parent.is_object() {
                    let text = |key: &str| parent[key].as_str().unwrap_or_default().to_string();
                    let mut shown = text("resource");
                    if !text("group").is_empty() {
                        shown = format!("{shown}.{}", text("group"));
                    }
                    shown = shown.to_lowercase();
                    if !text("namespace").is_empty() {
                        shown = format!("{shown}/{}", text("namespace"));
                    }
                    format!("{shown}/{}", text("name"))
                } else {
                    "<none>".into()
                };
                vec![name(o), json!(parent), age(o, now)]
            },
            ("node.k8s.io", "runtimeclasses") => {
                |o, now| vec![name(o), text_or(&o["handler"], ""), age(o, now)]
            }
            ("storage.k8s.io", "csidrivers") => print_csi_driver,
            ("storage.k8s.io", "csinodes") => {
                |o, now| vec![name(o), json!(len(&o["spec"]["drivers"])), age(o, now)]
            }
            ("storage.k8s.io", "volumeattachments") => |o, now| {
                vec![
                    name(o),
                    text_or(&o["spec"]["attacher"], ""),
                    text_or(&o["spec"]["source"]["persistentVolumeName"], ""),
                    text_or(&o["spec"]["nodeName"], ""),
                    json!(o["status"]["attached"].as_bool().unwrap_or(false)),
                    age(o, now),
                ]
            },
            ("storage.k8s.io", "volumeattributesclasses") => {
                |o, now| vec![name(o), text_or(&o["driverName"], ""), age(o, now)]
            }
            ("flowcontrol.apiserver.k8s.io", "flowschemas") => |o, now| {
                let spec = &o["spec"];
                let dangling = o["status"]["conditions"]
                    .as_array()
                    .and_then(|c| c.iter().find(|c| c["type"] == "Dangling"))
                    .map_or_else(|| json!("?"), |c| c["status"].clone());
                vec![
                    name(o),
                    text_or(&spec["priorityLevelConfiguration"]["name"], ""),
                    json!(int(&spec["matchingPrecedence"])),
                    text_or(&spec["distinguisherMethod"]["type"], "<none>"),
                    age(o, now),
                    dangling,
                ]
            },
            ("flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations") => |o, now| {
                let limited = &o["spec"]["limited"];
                let queuing = &limited["limitResponse"]["queuing"];
                let number = |v: &Value, shown: bool| {
                    if shown {
                        json!(int(v))
                    } else {
                        json!("<none>")
                    }
                };
                vec![
                    name(o),
                    text_or(&o["spec"]["type"], ""),
                    number(&limited["nominalConcurrencyShares"], limited.is_object()),
                    number(&queuing["queues"], queuing.is_object()),
                    number(&queuing["handSize"], queuing.is_object()),
                    number(&queuing["queueLengthLimit"], queuing.is_object()),
                    age(o, now),
                ]
            },
            ("", "componentstatuses") => |o, _| {
                let healthy = o["conditions"]
                    .as_array()
                    .and_then(|c| c.iter().find(|c| c["type"] == "Healthy"));
                let status = match healthy {
                    Some(c) if c["status"] == "True" => "Healthy",
                    Some(_) => "Unhealthy",
                    None => "Unknown",
                };
                let text = |key: &str| healthy.map_or_else(|| json!(""), |c| text_or(&c[key], ""));
                vec![name(o), json!(status), text("message"), text("error")]
            },
            _ if is_default(&columns) => |o, now| vec![name(o), age(o, now)],
            _ => return None,
        };
    Some(Printer::BuiltIn(print, columns))
}

/// The default convertor's columns: `Name`, `Created At`.
fn is_default(columns: &Value) -> bool {
    columns
        .as_array()
        .is_some_and(|c| c.len() == 2 && c[1]["name"] == "Created At")
}

fn custom_printer(crd: &Value, version: &str) -> Printer {
    let declared = crd["spec"]["versions"]
        .as_array()
        .and_then(|versions| versions.iter().find(|v| v["name"] == version))
        .and_then(|v| v["additionalPrinterColumns"].as_array())
        .filter(|c| !c.is_empty())
        .cloned();
    let declared = declared.unwrap_or_else(|| {
        vec![
            json!({"name": "Age", "type": "date", "description": creation_description(),
                    "jsonPath": ".metadata.creationTimestamp"}),
        ]
    });
    let mut columns = vec![name_column()];
    let mut paths = Vec::new();
    for column in declared {
        let path = column["jsonPath"].as_str().unwrap_or_default().to_string();
        let description = match column["description"].as_str() {
            Some(d) if !d.is_empty() => d.to_string(),
            _ => format!("Custom resource definition column (in JSONPath format): {path}"),
        };
        columns.push(json!({"name": column["name"], "type": column["type"],
            "format": column["format"].as_str().unwrap_or_default(),
            "description": description, "priority": column["priority"].as_i64().unwrap_or(0)}));
        paths.push(path);
    }
    Printer::Custom(columns, paths)
}

/// `answer` (an object or a list of `rt`, as the client's `version` sees it; `crd` defines
/// `rt` when it is a custom resource) as a Table, with the column definitions when
/// `with_columns`; `None` when `rt` has no printer here or the answer is not an object or
/// a list.
pub fn convert(
    rt: &ResourceType,
    crd: Option<&Value>,
    version: &str,
    answer: &Value,
    include: Include,
    with_columns: bool,
    now: DateTime<Utc>,
) -> Option<Value> {
    if answer["kind"] == "Status" || !answer.is_object() {
        return None;
    }
    let printer = printer(rt, crd, version)?;
    let (items, mut metadata) = match answer["items"].as_array() {
        Some(items) => {
            let mut metadata = json!({});
            for key in ["resourceVersion", "continue", "remainingItemCount"] {
                if let Some(v) = answer["metadata"]
                    .get(key)
                    .filter(|v| !v.is_null() && *v != "")
                {
                    metadata[key] = v.clone();
                }
            }
            let mut items = items.clone();
            if rt.group == "flowcontrol.apiserver.k8s.io" && rt.resource == "flowschemas" {
                // `FlowSchemaSequence`: by matching precedence, then name.
                items.sort_by(|a, b| {
                    let key = |o: &Value| {
                        (
                            int(&o["spec"]["matchingPrecedence"]),
                            o["metadata"]["name"]
                                .as_str()
                                .unwrap_or_default()
                                .to_string(),
                        )
                    };
                    key(a).cmp(&key(b))
                });
            }
            (items, metadata)
        }
        None => {
            let mut metadata = json!({});
            if let Some(rv) = answer["metadata"]["resourceVersion"].as_str() {
                metadata["resourceVersion"] = json!(rv);
            }
            (vec![answer.clone()], metadata)
        }
    };
    let rows: Vec<Value> = items
        .iter()
        .map(|item| {
            let (cells, conditions) = match &printer {
                Printer::BuiltIn(print, _) => (print(item, now), row_conditions(rt, item)),
                Printer::Custom(columns, paths) => {
                    (custom_cells(item, &columns[1..], paths, now), None)
                }
            };
            let mut row = json!({"cells": cells});
            if let Some(conditions) = conditions {
                row["conditions"] = conditions;
            }
            match include {
                Include::None => {}
                Include::Metadata => {
                    row["object"] = json!({"kind": "PartialObjectMetadata",
                        "apiVersion": "meta.k8s.io/v1", "metadata": item["metadata"]});
                }
                Include::Object => {
                    // A list's items carry no kind; the row's object says what it is.
                    let mut object = item.clone();
                    object["kind"] = json!(rt.kind);
                    object["apiVersion"] = json!(rt.api_version(version));
                    row["object"] = object;
                }
            }
            row
        })
        .collect();
    if let Some(m) = metadata.as_object_mut()
        && m.is_empty()
    {
        metadata = json!({});
    }
    let mut table = json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata});
    if with_columns {
        table["columnDefinitions"] = match printer {
            Printer::BuiltIn(_, columns) => columns,
            Printer::Custom(columns, _) => Value::Array(columns),
        };
    }
    table["rows"] = Value::Array(rows);
    Some(table)
}

/// A pod that ended is marked completed (`podSuccessConditions`, `podFailedConditions`).
fn row_conditions(rt: &ResourceType, obj: &Value) -> Option<Value> {
    if !(rt.group.is_empty() && rt.resource == "pods") {
        return None;
    }
    let (reason, message) = match obj["status"]["phase"].as_str()? {
        "Succeeded" => ("Succeeded", "The pod has completed successfully."),
        "Failed" => ("Failed", "The pod failed."),
        _ => return None,
    };
    Some(json!([{"type": "Completed", "status": "True", "reason": reason, "message": message}]))
}

fn name(obj: &Value) -> Value {
    obj["metadata"]["name"].clone()
}

fn len(value: &Value) -> usize {
    match value {
        Value::Object(m) => m.len(),
        Value::Array(a) => a.len(),
        _ => 0,
    }
}

fn int(value: &Value) -> i64 {
    value.as_i64().unwrap_or(0)
}

fn time(value: &Value) -> Option<DateTime<Utc>> {
    value
        .as_str()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
}

fn age(obj: &Value, now: DateTime<Utc>) -> Value {
    json!(since(time(&obj["metadata"]["creationTimestamp"]), now))
}

/// `translateTimestampSince`: `duration.HumanDuration` of the time since `t`.
fn since(t: Option<DateTime<Utc>>, now: DateTime<Utc>) -> String {
    match t {
        Some(t) => human_duration((now - t).num_milliseconds()),
        None => "<unknown>".into(),
    }
}

/// `duration.HumanDuration` of `millis`.
pub fn human_duration(millis: i64) -> String {
    let seconds = millis / 1000;
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        return if days == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{days}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// `layoutContainerCells` of a pod template: container names and images, comma-joined.
fn containers(template: &Value) -> (String, String) {
    let list = template["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let field = |key: &str| {
        list.iter()
            .map(|c| c[key].as_str().unwrap_or_default())
            .collect::<Vec<_>>()
            .join(",")
    };
    (field("name"), field("image"))
}

/// A label map's `k=v` pairs, by key.
fn label_pairs(labels: &Value) -> Vec<String> {
    labels
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default()
}

/// `metav1.FormatLabelSelector`: `<none>` for none, else the selector's string form.
fn label_selector(selector: &Value) -> String {
    if !selector.is_object() {
        return "<none>".into();
    }
    let mut parts = label_pairs(&selector["matchLabels"]);
    for expression in selector["matchExpressions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
    {
        let key = expression["key"].as_str().unwrap_or_default();
        let values: Vec<&str> = expression["values"]
            .as_array()
            .map(|v| v.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut sorted = values.clone();
        sorted.sort_unstable();
        parts.push(match expression["operator"].as_str().unwrap_or_default() {
            "In" => format!("{key} in ({})", sorted.join(",")),
            "NotIn" => format!("{key} notin ({})", sorted.join(",")),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            _ => continue,
        });
    }
    parts.sort();
    if parts.is_empty() {
        "<none>".into()
    } else {
        parts.join(",")
    }
}

fn print_deployment(o: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let (names, images) = containers(&o["spec"]["template"]);
    let status = &o["status"];
    // LabelSelectorAsSelector: an empty selector selects everything (""), a missing one nothing.
    let selector = match &o["spec"]["selector"] {
        Value::Object(_) => {
            let s = label_selector(&o["spec"]["selector"]);
            if s == "<none>" { String::new() } else { s }
        }
        _ => String::new(),
    };
    vec![
        name(o),
        json!(format!(
            "{}/{}",
            int(&status["readyReplicas"]),
            int(&o["spec"]["replicas"])
        )),
        json!(int(&status["updatedReplicas"])),
        json!(int(&status["availableReplicas"])),
        age(o, now),
        json!(names),
        json!(images),
        json!(selector),
    ]
}

/// Access modes as kubectl abbreviates them (`GetAccessModesAsString`), in its order.
fn access_modes(modes: &Value) -> String {
    let has = |mode: &str| {
        modes
            .as_array()
            .is_some_and(|m| m.iter().any(|x| x == mode))
    };
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(mode, _)| has(mode))
    .map(|(_, short)| *short)
    .collect::<Vec<_>>()
    .join(",")
}

/// A phase, or `Terminating` once the object is being deleted.
fn phase_or_terminating(o: &Value) -> Value {
    if o["metadata"]["deletionTimestamp"].is_string() {
        json!("Terminating")
    } else {
        json!(o["status"]["phase"].as_str().unwrap_or_default())
    }
}

fn text_or(value: &Value, default: &str) -> Value {
    json!(value.as_str().unwrap_or(default))
}

/// The class a claim or volume names (the beta annotation first).
fn storage_class_of(o: &Value) -> Value {
    let beta = &o["metadata"]["annotations"]["volume.beta.kubernetes.io/storage-class"];
    text_or(
        if beta.is_string() {
            beta
        } else {
            &o["spec"]["storageClassName"]
        },
        "",
    )
}

fn print_claim(o: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let spec = &o["spec"];
    let bound = spec["volumeName"].as_str().is_some_and(|v| !v.is_empty());
    let (capacity, modes) = if bound {
        (
            text_or(&o["status"]["capacity"]["storage"], "0"),
            json!(access_modes(&o["status"]["accessModes"])),
        )
    } else {
        (json!(""), json!(""))
    };
    vec![
        name(o),
        phase_or_terminating(o),
        text_or(&spec["volumeName"], ""),
        capacity,
        modes,
        storage_class_of(o),
        text_or(&spec["volumeAttributesClassName"], "<unset>"),
        age(o, now),
        text_or(&spec["volumeMode"], "<unset>"),
    ]
}

fn print_volume(o: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let spec = &o["spec"];
    let claim = if spec["claimRef"].is_object() {
        format!(
            "{}/{}",
            spec["claimRef"]["namespace"].as_str().unwrap_or_default(),
            spec["claimRef"]["name"].as_str().unwrap_or_default()
        )
    } else {
        String::new()
    };
    vec![
        name(o),
        text_or(&spec["capacity"]["storage"], "0"),
        json!(access_modes(&spec["accessModes"])),
        text_or(&spec["persistentVolumeReclaimPolicy"], ""),
        phase_or_terminating(o),
        json!(claim),
        storage_class_of(o),
        text_or(&spec["volumeAttributesClassName"], "<unset>"),
        text_or(&o["status"]["reason"], ""),
        age(o, now),
        text_or(&spec["volumeMode"], "<unset>"),
    ]
}

fn print_storage_class(o: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let annotations = &o["metadata"]["annotations"];
    let default = annotations["storageclass.kubernetes.io/is-default-class"] == "true"
        || annotations["storageclass.beta.kubernetes.io/is-default-class"] == "true";
    let mut shown = o["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if default {
        shown.push_str(" (default)");
    }
    vec![
        json!(shown),
        text_or(&o["provisioner"], ""),
        text_or(&o["reclaimPolicy"], "Delete"),
        text_or(&o["volumeBindingMode"], "Immediate"),
        json!(o["allowVolumeExpansion"].as_bool().unwrap_or(false)),
        age(o, now),
    ]
}

/// `printJob`: its state from its conditions, the completions counted against
/// `completions` (or parallelism), how long it ran.
fn print_job(o: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let (spec, status) = (&o["spec"], &o["status"]);
    let succeeded = int(&status["succeeded"]);
    let completions = match spec["completions"].as_i64() {
        Some(total) => format!("{succeeded}/{total}"),
        None if int(&spec["parallelism"]) > 1 => {
            format!("{succeeded}/1 of {}", int(&spec["parallelism"]))
        }
        None => format!("{succeeded}/1"),
    };
    let duration = match (time(&status["startTime"]), time(&status["completionTime"])) {
        (None, _) => String::new(),
        (Some(start), None) => human_duration((now - start).num_milliseconds()),
        (Some(start), Some(end)) => human_duration((end - start).num_milliseconds()),
    };
    // `hasJobCondition`: the first condition of the type decides.
    let has = |kind: &str| {
        status["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == kind))
            .is_some_and(|c| c["status"] == "True")
    };
    let state = if has("Complete") {
        "Complete"
    } else if has("Failed") {
        "Failed"
    } else if !o["metadata"]["deletionTimestamp"].is_null() {
        "Terminating"
    } else if has("Suspended") {
        "Suspended"
    } else if has("FailureTarget") {
        "FailureTarget"
    } else if has("SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else {
        "Running"
    };
    let mut cells = vec![
        name(o),
        json!(state),
        json!(completions),
        json!(duration),
        age(o, now),
    ];
    cells.extend(wide_cells(&spec["template"], &spec["selector"]));
    cells
}

/// The wide columns of a workload: its template's containers and images, its selector.
fn wide_cells(template: &Value, selector: &Value) -> [Value; 3] {
    let (names, images) = containers(template);
    [json!(names), json!(images), json!(label_selector(selector))]
}

/// `printCronJob`.
fn print_cron_job(o: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let (spec, status) = (&o["spec"], &o["status"]);
    let last_schedule = match time(&status["lastScheduleTime"]) {
        Some(t) => since(Some(t), now),
        None => "<none>".into(),
    };
    let suspend = match spec["suspend"].as_bool() {
        Some(true) => "True",
        Some(false) => "False",
        None => "<unset>",
    };
    let job = &spec["jobTemplate"]["spec"];
    let mut cells = vec![
        name(o),
        spec["schedule"].clone(),
        text_or(&spec["timeZone"], "<none>"),
        json!(suspend),
        json!(len(&status["active"])),
        json!(last_schedule),
        age(o, now),
    ];
    cells.extend(wide_cells(&job["template"], &job["selector"]));
    cells
}

/// `printDaemonSet`.
fn print_daemon_set(o: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let status = &o["status"];
    let template = &o["spec"]["template"];
    let mut cells = vec![
        name(o),
        json!(int(&status["desiredNumberScheduled"])),
        json!(int(&status["currentNumberScheduled"])),
        json!(int(&status["numberReady"])),
        json!(int(&status["updatedNumberScheduled"])),
        json!(int(&status["numberAvailable"])),
        json!(format_labels(&template["spec"]["nodeSelector"])),
        age(o, now),
    ];
    cells.extend(wide_cells(template, &o["spec"]["selector"]));
    cells
}

/// `labels.FormatLabels`: `k=v` sorted by key, `<none>` for none.
fn format_labels(labels: &Value) -> String {
    let pairs = label_pairs(labels);
    if pairs.is_empty() {
        "<none>".into()
    } else {
        pairs.join(",")
    }
}

/// `printControllerRevision`: the controller as `<kind>.<group>/<name>`, lowercased.
fn print_controller_revision(o: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let controller = o["metadata"]["ownerReferences"]
        .as_array()
        .and_then(|refs| refs.iter().find(|r| r["controller"] == true))
        .map_or_else(
            || "<none>".to_string(),
            |r| {
                let api_version = r["apiVersion"].as_str().unwrap_or_default();
                let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
                let kind = r["kind"].as_str().unwrap_or_default();
                let group_kind = if group.is_empty() {
                    kind.to_string()
                } else {
                    format!("{kind}.{group}")
                };
                format!(
                    "{}/{}",
                    group_kind.to_lowercase(),
                    r["name"].as_str().unwrap_or_default()
                )
            },
        );
    vec![
        name(o),
        json!(controller),
        json!(int(&o["revision"])),
        age(o, now),
    ]
}

/// `formatEndpoints`: the first three `ip:port` (or `ip` of a subset without ports), and
/// how many more.
fn endpoints(o: &Value) -> String {
    let subsets = o["subsets"].as_array().cloned().unwrap_or_default();
    if subsets.is_empty() {
        return "<none>".into();
    }
    const MAX: usize = 3;
    let mut list: Vec<String> = Vec::new();
    let mut count = 0;
    let mut more = false;
    for subset in &subsets {
        let addresses: Vec<&str> = subset["addresses"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|a| a["ip"].as_str().unwrap_or_default())
                    .collect()
            })
            .unwrap_or_default();
        let ports: Vec<i64> = subset["ports"]
            .as_array()
            .map(|p| p.iter().map(|p| int(&p["port"])).collect())
            .unwrap_or_default();
        let ports: Vec<Option<i64>> = if ports.is_empty() {
            vec![None]
        } else {
            ports.into_iter().map(Some).collect()
        };
        for port in ports {
            count += addresses.len();
            for ip in &addresses {
                if list.len() == MAX {
                    more = true;
                    break;
                }
                list.push(match port {
                    None => (*ip).to_string(),
                    Some(port) if ip.contains(':') => format!("[{ip}]:{port}"),
                    Some(port) => format!("{ip}:{port}"),
                });
            }
        }
    }
    let joined = list.join(",");
    if more {
        format!("{joined} + {} more...", count - MAX)
    } else {
        joined
    }
}

/// `printIngress`: its class, the first three hosts (`*` for none), the load balancer's
/// addresses, and its ports (`80, 443` with TLS).
fn print_ingress(o: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let spec = &o["spec"];
    let rules = spec["rules"].as_array().cloned().unwrap_or_default();
    const MAX: usize = 3;
    let mut hosts: Vec<&str> = Vec::new();
    let mut more = false;
    for rule in &rules {
        if hosts.len() == MAX {
            more = true;
        }
        if let Some(host) = rule["host"].as_str().filter(|h| !more && !h.is_empty()) {
            hosts.push(host);
        }
    }
    let hosts = match (hosts.is_empty(), more) {
        (true, _) => "*".to_string(),
        (false, true) => format!("{} + {} more...", hosts.join(","), rules.len() - MAX),
        (false, false) => hosts.join(","),
    };
    let mut addresses: Vec<String> = o["status"]["loadBalancer"]["ingress"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|i| {
                    i["ip"]
                        .as_str()
                        .filter(|ip| !ip.is_empty())
                        .or_else(|| i["hostname"].as_str().filter(|h| !h.is_empty()))
                        .map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default();
    addresses.sort();
    addresses.dedup();
    let ports = if len(&spec["tls"]) > 0 {
        "80, 443"
    } else {
        "80"
    };
    vec![
        name(o),
        text_or(&spec["ingressClassName"], "<none>"),
        json!(hosts),
        json!(addresses.join(",")),
        json!(ports),
        age(o, now),
    ]
}

fn print_replica_set(o: &Value, now: DateTime<Utc>) -> Vec<Value> {
    replica_cells(o, now, label_selector(&o["spec"]["selector"]))
}

/// The cells of a ReplicaSet or a ReplicationController: desired, current and ready
/// replicas, age, containers, images, and the selector as its kind prints it.
fn replica_cells(o: &Value, now: DateTime<Utc>, selector: String) -> Vec<Value> {
    let (names, images) = containers(&o["spec"]["template"]);
    vec![
        name(o),
        json!(int(&o["spec"]["replicas"])),
        json!(int(&o["status"]["replicas"])),
        json!(int(&o["status"]["readyReplicas"])),
        age(o, now),
        json!(names),
        json!(images),
        json!(selector),
    ]
}

fn print_service(o: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let spec = &o["spec"];
    let kind = spec["type"].as_str().unwrap_or_default();
    let internal = spec["clusterIPs"]
        .get(0)
        .and_then(Value::as_str)
        .unwrap_or("<none>")
        .to_string();
    let external_ips: Vec<&str> = spec["externalIPs"]
        .as_array()
        .map(|ips| ips.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let external = match kind {
        "ClusterIP" | "NodePort" if !external_ips.is_empty() => external_ips.join(","),
        "ClusterIP" | "NodePort" => "<none>".into(),
        "LoadBalancer" => {
            let ingress: Vec<String> = o["status"]["loadBalancer"]["ingress"]
                .as_array()
                .map(|list| {
                    list.iter()
                        .filter_map(|i| i["ip"].as_str().or_else(|| i["hostname"].as_str()))
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            let mut all = ingress;
            all.extend(external_ips.iter().map(|s| s.to_string()));
            if all.is_empty() {
                "<pending>".into()
            } else {
                all.join(",")
            }
        }
        "ExternalName" => spec["externalName"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        _ => "<unknown>".into(),
    };
    let ports: Vec<String> = spec["ports"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|p| {
                    let protocol = p["protocol"].as_str().unwrap_or_default();
                    match p["nodePort"].as_i64().filter(|n| *n > 0) {
                        Some(node) => format!("{}:{node}/{protocol}", int(&p["port"])),
                        None => format!("{}/{protocol}", int(&p["port"])),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let ports = if ports.is_empty() {
        "<none>".to_string()
    } else {
        ports.join(",")
    };
    // labels.FormatLabels: sorted key=value pairs, `<none>` when empty.
    let selector = spec["selector"]
        .as_object()
        .filter(|s| !s.is_empty())
        .map(|s| {
            let mut pairs: Vec<String> = s
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect();
            pairs.sort();
            pairs.join(",")
        })
        .unwrap_or_else(|| "<none>".into());
    vec![
        name(o),
        json!(kind),
        json!(internal),
        json!(external),
        json!(ports),
        age(o, now),
        json!(selector),
    ]
}

/// `printPod`: ready containers, the status a person reads (the reason of the last
/// container's state, an init container's progress, `Terminating`), the restarts and when
/// the last one was, then the wide columns.
fn print_pod(o: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let spec = &o["spec"];
    let status = &o["status"];
    let list = |v: &Value| v.as_array().cloned().unwrap_or_default();
    let init_specs = list(&spec["initContainers"]);
    let restartable = |name: &str| {
        init_specs
            .iter()
            .any(|c| c["name"] == name && c["restartPolicy"] == "Always")
    };
    let mut total = list(&spec["containers"]).len();
    total += init_specs
        .iter()
        .filter(|c| c["restartPolicy"] == "Always")
        .count();
    let phase = status["phase"].as_str().unwrap_or_default().to_string();
    let mut reason = match status["reason"].as_str() {
        Some(r) if !r.is_empty() => r.to_string(),
        _ => phase.clone(),
    };
    if list(&status["conditions"])
        .iter()
        .any(|c| c["type"] == "PodScheduled" && c["reason"] == "SchedulingGated")
    {
        reason = "SchedulingGated".into();
    }
    let mut restarts = 0;
    let mut restartable_restarts = 0;
    let mut ready = 0;
    let mut last_restart: Option<DateTime<Utc>> = None;
    let mut last_restartable_restart: Option<DateTime<Utc>> = None;
    let later = |a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>| match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    let mut initializing = false;
    let init_statuses = list(&status["initContainerStatuses"]);
    for (i, container) in init_statuses.iter().enumerate() {
        restarts += int(&container["restartCount"]);
        let finished = time(&container["lastState"]["terminated"]["finishedAt"]);
        last_restart = later(last_restart, finished);
        let container_name = container["name"].as_str().unwrap_or_default();
        if restartable(container_name) {
            restartable_restarts += int(&container["restartCount"]);
            last_restartable_restart = later(last_restartable_restart, finished);
        }
        let terminated = &container["state"]["terminated"];
        let waiting = &container["state"]["waiting"];
        if terminated.is_object() && int(&terminated["exitCode"]) == 0 {
            continue;
        }
        if restartable(container_name) && container["started"] == true {
            if container["ready"] == true {
                ready += 1;
            }
            continue;
        }
        if terminated.is_object() {
            reason = match terminated["reason"].as_str() {
                Some(r) if !r.is_empty() => format!("Init:{r}"),
                _ if int(&terminated["signal"]) != 0 => {
                    format!("Init:Signal:{}", int(&terminated["signal"]))
                }
                _ => format!("Init:ExitCode:{}", int(&terminated["exitCode"])),
            };
        } else if waiting["reason"]
            .as_str()
            .is_some_and(|r| !r.is_empty() && r != "PodInitializing")
        {
            reason = format!("Init:{}", waiting["reason"].as_str().unwrap_or_default());
        } else {
            reason = format!("Init:{i}/{}", init_specs.len());
        }
        initializing = true;
        break;
    }
    let initialized = list(&status["conditions"])
        .iter()
        .any(|c| c["type"] == "Initialized" && c["status"] == "True");
    if !initializing || initialized {
        restarts = restartable_restarts;
        last_restart = last_restartable_restart;
        let mut running = false;
        for container in list(&status["containerStatuses"]).iter().rev() {
            restarts += int(&container["restartCount"]);
            last_restart = later(
                last_restart,
                time(&container["lastState"]["terminated"]["finishedAt"]),
            );
            let waiting = &container["state"]["waiting"];
            let terminated = &container["state"]["terminated"];
            if let Some(r) = waiting["reason"].as_str().filter(|r| !r.is_empty()) {
                reason = r.to_string();
            } else if let Some(r) = terminated["reason"].as_str().filter(|r| !r.is_empty()) {
                reason = r.to_string();
            } else if terminated.is_object() {
                reason = if int(&terminated["signal"]) != 0 {
                    format!("Signal:{}", int(&terminated["signal"]))
                } else {
                    format!("ExitCode:{}", int(&terminated["exitCode"]))
                };
            } else if container["ready"] == true && container["state"]["running"].is_object() {
                running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && running {
            let pod_ready = list(&status["conditions"])
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            reason = if pod_ready { "Running" } else { "NotReady" }.into();
        }
    }
    let deleting = o["metadata"]["deletionTimestamp"].is_string();
    if deleting && status["reason"] == "NodeLost" {
        reason = "Unknown".into();
    } else if deleting && phase != "Succeeded" && phase != "Failed" {
        reason = "Terminating".into();
    }
    let restarts_text = match last_restart {
        Some(t) if restarts != 0 => format!("{restarts} ({} ago)", since(Some(t), now)),
        _ => restarts.to_string(),
    };
    let or_none = |v: &Value| match v.as_str() {
        Some(s) if !s.is_empty() => s.to_string(),
        _ => "<none>".to_string(),
    };
    let gates = list(&spec["readinessGates"]);
    let readiness_gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let conditions = list(&status["conditions"]);
        let met = gates
            .iter()
            .filter(|g| {
                conditions
                    .iter()
                    .find(|c| c["type"] == g["conditionType"])
                    .is_some_and(|c| c["status"] == "True")
            })
            .count();
        format!("{met}/{}", gates.len())
    };
    vec![
        name(o),
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts_text),
        age(o, now),
        json!(or_none(&status["podIPs"][0]["ip"])),
        json!(or_none(&spec["nodeName"])),
        json!(or_none(&status["nominatedNodeName"])),
        json!(readiness_gates),
    ]
}

/// A custom resource's cells: its name, then each column's JSONPath result as the CRD
/// table convertor prints it (`null` when the path finds nothing).
fn custom_cells(
    obj: &Value,
    columns: &[Value],
    paths: &[String],
    now: DateTime<Utc>,
) -> Vec<Value> {
    let mut cells = vec![name(obj)];
    for (column, path) in columns.iter().zip(paths) {
        let found = simple_json_path(obj, path).filter(|v| !v.is_null());
        let cell = match (found, column["type"].as_str().unwrap_or_default()) {
            (None, _) => Value::Null,
            (Some(v), "string") => json!(go_print(v)),
            (Some(v), "integer") => v.as_f64().map(|f| json!(f as i64)).unwrap_or(Value::Null),
            (Some(v), "number") => v.as_f64().map(|f| json!(f)).unwrap_or(Value::Null),
            (Some(Value::Bool(b)), "boolean") => json!(b),
            (Some(Value::String(s)), "date") => match time(&json!(s)) {
                Some(t) => json!(since(Some(t), now)),
                None => json!("<invalid>"),
            },
            _ => Value::Null,
        };
        cells.push(cell);
    }
    cells
}

/// A JSONPath of fields and list indexes (`.status.conditions[0].type`), the form CRD
/// printer columns use.
fn simple_json_path<'v>(obj: &'v Value, path: &str) -> Option<&'v Value> {
    let mut current = obj;
    for segment in path.trim_start_matches('.').split('.') {
        if segment.is_empty() {
            continue;
        }
        let (field, indexes) = match segment.find('[') {
            Some(at) => (&segment[..at], &segment[at..]),
            None => (segment, ""),
        };
        if !field.is_empty() {
            current = current.get(field)?;
        }
        for index in indexes.split('[').skip(1) {
            let index: usize = index.trim_end_matches(']').parse().ok()?;
            current = current.get(index)?;
        }
    }
    Some(current)
}

/// A value as Go's `fmt` prints what JSON decoded into (`text/template`'s printing of a
/// JSONPath result): strings bare, numbers and booleans plainly, maps and lists in Go's
/// `map[k:v]` and `[a b]` forms.
fn go_print(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => "<nil>".into(),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(go_print).collect::<Vec<_>>().join(" ")
        ),
        Value::Object(map) => format!(
            "map[{}]",
            map.iter()
                .map(|(k, v)| format!("{k}:{}", go_print(v)))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    }
}

/// `printNode`: `Ready` or `NotReady` by the Ready condition (`Unknown` without one),
/// `SchedulingDisabled` when unschedulable; the roles of its `node-role.kubernetes.io/`
/// labels and `kubernetes.io/role`; its kubelet, first addresses and system.
fn print_node(o: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let mut status: Vec<&str> = o["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().rev().find(|c| c["type"] == "Ready"))
        .map(|c| {
            if c["status"] == "True" {
                "Ready"
            } else {
                "NotReady"
            }
        })
        .into_iter()
        .collect();
    if status.is_empty() {
        status.push("Unknown");
    }
    if o["spec"]["unschedulable"] == true {
        status.push("SchedulingDisabled");
    }
    let mut roles: Vec<String> = o["metadata"]["labels"]
        .as_object()
        .map(|labels| {
            labels
                .iter()
                .filter_map(
                    |(key, value)| match key.strip_prefix("node-role.kubernetes.io/") {
                        Some(role) if !role.is_empty() => Some(role.to_string()),
                        Some(_) => None,
                        None if key == "kubernetes.io/role" => {
                            value.as_str().filter(|v| !v.is_empty()).map(str::to_string)
                        }
                        None => None,
                    },
                )
                .collect()
        })
        .unwrap_or_default();
    roles.sort();
    roles.dedup();
    let roles = if roles.is_empty() {
        "<none>".to_string()
    } else {
        roles.join(",")
    };
    let info = &o["status"]["nodeInfo"];
    let address = |kind: &str| {
        o["status"]["addresses"]
            .as_array()
            .and_then(|a| a.iter().find(|a| a["type"] == kind))
            .map_or_else(|| json!("<none>"), |a| a["address"].clone())
    };
    let or_unknown = |v: &Value| match v.as_str() {
        Some(text) if !text.is_empty() => json!(text),
        _ => json!("<unknown>"),
    };
    vec![
        name(o),
        json!(status.join(",")),
        json!(roles),
        age(o, now),
        text_or(&info["kubeletVersion"], ""),
        address("InternalIP"),
        address("ExternalIP"),
        or_unknown(&info["osImage"]),
        or_unknown(&info["kernelVersion"]),
        or_unknown(&info["containerRuntimeVersion"]),
    ]
}

/// `printEvent` (wide), of a `v1` Event or an `events.k8s.io` one read as the `v1` Event it
/// converts to: last and first seen (from the event time without timestamps; the series'
/// last observation), the involved object as `kind/name`, the source, the count (one for a
/// singleton).
fn print_event(o: &Value, now: DateTime<Utc>) -> Vec<Value> {
    const NEW_ONLY: [&str; 6] = [
        "regarding",
        "note",
        "deprecatedSource",
        "deprecatedFirstTimestamp",
        "deprecatedLastTimestamp",
        "deprecatedCount",
    ];
    let core = !NEW_ONLY.iter().any(|key| o.get(*key).is_some());
    let field = |core_key: &str, new_key: &str| {
        if core { &o[core_key] } else { &o[new_key] }
    };
    let first = match time(field("firstTimestamp", "deprecatedFirstTimestamp")) {
        Some(t) => since(Some(t), now),
        None => since(time(&o["eventTime"]), now),
    };
    let mut last = match time(field("lastTimestamp", "deprecatedLastTimestamp")) {
        Some(t) => since(Some(t), now),
        None => first.clone(),
    };
    let mut count = int(field("count", "deprecatedCount"));
    if o["series"].is_object() {
        last = since(time(&o["series"]["lastObservedTime"]), now);
        count = int(&o["series"]["count"]);
    } else if count == 0 {
        count = 1;
    }
    let involved = field("involvedObject", "regarding");
    let kind = involved["kind"].as_str().unwrap_or_default().to_lowercase();
    let target = match involved["name"].as_str() {
        Some(name) if !name.is_empty() => format!("{kind}/{name}"),
        _ => kind,
    };
    let source = field("source", "deprecatedSource");
    let first_non_empty = |a: &Value, b: &Value| {
        [a, b]
            .iter()
            .filter_map(|v| v.as_str())
            .find(|v| !v.is_empty())
            .unwrap_or_default()
            .to_string()
    };
    let reporter = field("reportingComponent", "reportingController");
    let component = first_non_empty(&source["component"], reporter);
    let instance = first_non_empty(&source["host"], &o["reportingInstance"]);
    let source = if instance.is_empty() {
        component
    } else {
        format!("{component}, {instance}")
    };
    let message = field("message", "note").as_str().unwrap_or_default().trim();
    vec![
        json!(last),
        text_or(&o["type"], ""),
        text_or(&o["reason"], ""),
        json!(target),
        text_or(&involved["fieldPath"], ""),
        json!(source),
        json!(message),
        json!(first),
        json!(count),
        name(o),
    ]
}

/// `listWithMoreString`: the first three, then how many more; `<unset>` for none.
fn first_three(items: &[String]) -> String {
    const MAX: usize = 3;
    match items.len() {
        0 => "<unset>".into(),
        n if n > MAX => format!("{} + {} more...", items[..MAX].join(","), n - MAX),
        _ => items.join(","),
    }
}

/// `printEndpointSlice`: ports (a port's number, else its name, else `*`) and addresses,
/// each list cut at three.
fn print_endpoint_slice(o: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let ports: Vec<String> = o["ports"]
        .as_array()
        .map(|ports| {
            ports
                .iter()
                .map(|p| match (&p["port"], p["name"].as_str()) {
                    (Value::Number(n), _) => n.to_string(),
                    (_, Some(name)) => name.to_string(),
                    _ => "*".to_string(),
                })
                .collect()
        })
        .unwrap_or_default();
    let addresses: Vec<String> = o["endpoints"]
        .as_array()
        .map(|endpoints| {
            endpoints
                .iter()
                .filter_map(|e| e["addresses"].as_array())
                .flatten()
                .filter_map(|a| a.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    vec![
        name(o),
        text_or(&o["addressType"], ""),
        json!(first_three(&ports)),
        json!(first_three(&addresses)),
        age(o, now),
    ]
}

/// `formatHPAMetrics` of an `autoscaling/v2` HorizontalPodAutoscaler (an `autoscaling/v1`
/// one's CPU target read as the metric it converts to): each metric's current and target
/// value, two at most.
fn autoscaler_metrics(o: &Value) -> String {
    const MAX: usize = 2;
    let spec = &o["spec"];
    let status = &o["status"];
    let (specs, statuses) = match spec["targetCPUUtilizationPercentage"].as_i64() {
        Some(target) => {
            let current = &status["currentCPUUtilizationPercentage"];
            let current = if current.is_number() {
                vec![json!({"type": "Resource", "resource": {"name": "cpu",
                    "current": {"averageUtilization": current}}})]
            } else {
                Vec::new()
            };
            (
                vec![json!({"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": target}}})],
                current,
            )
        }
        None => (
            spec["metrics"].as_array().cloned().unwrap_or_default(),
            status["currentMetrics"]
                .as_array()
                .cloned()
                .unwrap_or_default(),
        ),
    };
    if specs.is_empty() {
        return "<none>".into();
    }
    let quantity = |v: &Value| v.as_str().unwrap_or("0").to_string();
    let list: Vec<String> = specs
        .iter()
        .enumerate()
        .map(|(i, metric)| {
            let current_of = |key: &str| statuses.get(i).map(|s| &s[key]).filter(|c| c.is_object());
            let unknown = || "<unknown>".to_string();
            match metric["type"].as_str().unwrap_or_default() {
                kind @ ("External" | "Object") => {
                    let key = if kind == "External" {
                        "external"
                    } else {
                        "object"
                    };
                    let target = &metric[key]["target"];
                    let current = current_of(key).map(|c| &c["current"]);
                    if target["averageValue"].is_string() {
                        let current = current
                            .filter(|c| c["averageValue"].is_string())
                            .map_or_else(unknown, |c| quantity(&c["averageValue"]));
                        format!("{current}/{} (avg)", quantity(&target["averageValue"]))
                    } else {
                        let current = current.map_or_else(unknown, |c| quantity(&c["value"]));
                        format!("{current}/{}", quantity(&target["value"]))
                    }
                }
                "Pods" => {
                    let current = current_of("pods")
                        .map_or_else(unknown, |c| quantity(&c["current"]["averageValue"]));
                    format!(
                        "{current}/{}",
                        quantity(&metric["pods"]["target"]["averageValue"])
                    )
                }
                kind @ ("Resource" | "ContainerResource") => {
                    let key = if kind == "Resource" {
                        "resource"
                    } else {
                        "containerResource"
                    };
                    let source = &metric[key];
                    let resource = source["name"].as_str().unwrap_or_default();
                    let target = &source["target"];
                    let current = current_of(key).map(|c| &c["current"]);
                    if target["averageValue"].is_string() {
                        let current =
                            current.map_or_else(unknown, |c| quantity(&c["averageValue"]));
                        format!(
                            "{resource}: {current}/{}",
                            quantity(&target["averageValue"])
                        )
                    } else {
                        let current = current
                            .and_then(|c| c["averageUtilization"].as_i64())
                            .map_or_else(unknown, |u| format!("{u}%"));
                        let target = target["averageUtilization"]
                            .as_i64()
                            .map_or_else(|| "<auto>".to_string(), |u| format!("{u}%"));
                        format!("{resource}: {current}/{target}")
                    }
                }
                _ => "<unknown type>".into(),
            }
        })
        .collect();
    if list.len() > MAX {
        format!("{} + {} more...", list[..MAX].join(", "), list.len() - MAX)
    } else {
        list.join(", ")
    }
}

/// `printHorizontalPodAutoscaler`: the target as `Kind/name`, the metrics, the bounds and
/// the current replicas.
fn print_autoscaler(o: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let target = &o["spec"]["scaleTargetRef"];
    let min = match o["spec"]["minReplicas"].as_i64() {
        Some(min) => min.to_string(),
        None => "<unset>".into(),
    };
    vec![
        name(o),
        json!(format!(
            "{}/{}",
            target["kind"].as_str().unwrap_or_default(),
            target["name"].as_str().unwrap_or_default()
        )),
        json!(autoscaler_metrics(o)),
        json!(min),
        json!(int(&o["spec"]["maxReplicas"])),
        json!(int(&o["status"]["currentReplicas"])),
        age(o, now),
    ]
}

/// `printResourceQuota`: `resource: used/hard` of each resource of the status's `hard`, by
/// name, the `limits.` ones in their own column.
fn print_resource_quota(o: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let mut requests = Vec::new();
    let mut limits = Vec::new();
    if let Some(hard) = o["status"]["hard"].as_object() {
        let mut resources: Vec<&String> = hard.keys().collect();
        resources.sort();
        for resource in resources {
            let used = o["status"]["used"][resource.as_str()]
                .as_str()
                .unwrap_or("0");
            let hard = hard[resource.as_str()].as_str().unwrap_or("0");
            let line = format!("{resource}: {used}/{hard}");
            if resource.starts_with("limits.") {
                limits.push(line);
            } else {
                requests.push(line);
            }
        }
    }
    vec![
        name(o),
        json!(requests.join(", ")),
        json!(limits.join(", ")),
        age(o, now),
    ]
}

/// `printRoleBinding`, `printClusterRoleBinding`: the role as `Kind/name`, then the users,
/// groups and service accounts (`namespace/name`) bound.
fn print_role_binding(o: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let subjects = o["subjects"].as_array().cloned().unwrap_or_default();
    let of_kind = |kind: &str| {
        subjects
            .iter()
            .filter(|s| s["kind"] == kind)
            .map(|s| {
                let name = s["name"].as_str().unwrap_or_default();
                if kind == "ServiceAccount" {
                    format!("{}/{name}", s["namespace"].as_str().unwrap_or_default())
                } else {
                    name.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let role = &o["roleRef"];
    vec![
        name(o),
        json!(format!(
            "{}/{}",
            role["kind"].as_str().unwrap_or_default(),
            role["name"].as_str().unwrap_or_default()
        )),
        age(o, now),
        json!(of_kind("User")),
        json!(of_kind("Group")),
        json!(of_kind("ServiceAccount")),
    ]
}

/// `printValidatingAdmissionPolicyBinding`: the parameter as `namespace/name` (`*/name`
/// without a namespace), or its selector as Go's generated `String` prints it.
fn print_policy_binding(o: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let param = &o["spec"]["paramRef"];
    let name_of = param["name"].as_str().unwrap_or_default();
    let shown = if !param.is_object() {
        "<unset>".to_string()
    } else if !name_of.is_empty() {
        match param["namespace"].as_str() {
            Some(namespace) if !namespace.is_empty() => format!("{namespace}/{name_of}"),
            _ => format!("*/{name_of}"),
        }
    } else if param["selector"].is_object() {
        let selector = &param["selector"];
        let mut labels: Vec<(&String, &Value)> = selector["matchLabels"]
            .as_object()
            .map(|m| m.iter().collect())
            .unwrap_or_default();
        labels.sort_by_key(|(k, _)| *k);
        let labels: String = labels
            .iter()
            .map(|(k, v)| format!("{k}: {},", v.as_str().unwrap_or_default()))
            .collect();
        let expressions: String = selector["matchExpressions"]
            .as_array()
            .map(|e| {
                e.iter()
                    .map(|r| {
                        let values: Vec<&str> = r["values"]
                            .as_array()
                            .map(|v| v.iter().filter_map(Value::as_str).collect())
                            .unwrap_or_default();
                        format!(
                            "LabelSelectorRequirement{{Key:{},Operator:{},Values:[{}],}},",
                            r["key"].as_str().unwrap_or_default(),
                            r["operator"].as_str().unwrap_or_default(),
                            values.join(" ")
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        format!(
            "&LabelSelector{{MatchLabels:map[string]string{{{labels}}},MatchExpressions:[]LabelSelectorRequirement{{{expressions}}},}}"
        )
    } else {
        "<unset>".to_string()
    };
    vec![
        name(o),
        text_or(&o["spec"]["policyName"], ""),
        json!(shown),
        age(o, now),
    ]
}

/// `printCertificateSigningRequest`: the signer, the requester, the requested duration and
/// the state (`Denied` over `Approved` over `Pending`, then `,Failed`, `,Issued`).
fn print_signing_request(o: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let conditions = o["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let has = |kind: &str| conditions.iter().any(|c| c["type"] == kind);
    let mut state = if has("Denied") {
        "Denied"
    } else if has("Approved") {
        "Approved"
    } else {
        "Pending"
    }
    .to_string();
    if has("Failed") {
        state.push_str(",Failed");
    }
    if o["status"]["certificate"]
        .as_str()
        .is_some_and(|c| !c.is_empty())
    {
        state.push_str(",Issued");
    }
    let duration = match o["spec"]["expirationSeconds"].as_i64() {
        Some(seconds) => human_duration(seconds.saturating_mul(1000)),
        None => "<none>".into(),
    };
    let signer = match o["spec"]["signerName"].as_str() {
        Some(signer) if !signer.is_empty() => signer,
        _ => "<none>",
    };
    vec![
        name(o),
        age(o, now),
        json!(signer),
        text_or(&o["spec"]["username"], ""),
        json!(duration),
        json!(state),
    ]
}

/// `printCSIDriver`: its flags with their defaults, the token audiences (`<unset>` for
/// none asked) and the lifecycle modes (`<none>` for none).
fn print_csi_driver(o: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let spec = &o["spec"];
    let flag = |key: &str, default: bool| json!(spec[key].as_bool().unwrap_or(default));
    let joined = |list: &Value, key: Option<&str>| -> Vec<String> {
        list.as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|i| key.map_or(i, |k| &i[k]).as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let tokens = if spec["tokenRequests"].is_array() {
        joined(&spec["tokenRequests"], Some("audience")).join(",")
    } else {
        "<unset>".into()
    };
    let modes = joined(&spec["volumeLifecycleModes"], None).join(",");
    vec![
        name(o),
        flag("attachRequired", true),
        flag("podInfoOnMount", false),
        flag("storageCapacity", false),
        json!(tokens),
        flag("requiresRepublish", false),
        json!(if modes.is_empty() {
            "<none>".into()
        } else {
            modes
        }),
        age(o, now),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_kubectl_prints_them() {
        let cases = [
            (0, "0s"),
            (-1500, "0s"),
            (-3000, "<invalid>"),
            (119_000, "119s"),
            (125_000, "2m5s"),
            (600_000, "10m"),
            (3 * 3_600_000 + 5 * 60_000, "3h5m"),
            (30 * 3_600_000, "30h"),
            (3 * 86_400_000 + 3_600_000, "3d1h"),
            (400 * 86_400_000, "400d"),
        ];
        for (millis, text) in cases {
            assert_eq!(human_duration(millis), text, "{millis}");
        }
    }

    #[test]
    fn a_crash_looping_pod_shows_its_waiting_reason_and_when_it_last_restarted() {
        let now = Utc::now();
        let finished = (now - chrono::Duration::seconds(30)).to_rfc3339();
        let pod = json!({"metadata": {"name": "p", "creationTimestamp": (now - chrono::Duration::seconds(90)).to_rfc3339()},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
            "status": {"phase": "Running", "podIPs": [{"ip": "10.1.0.5"}], "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 0, "state": {"running": {}}},
                {"name": "b", "ready": false, "restartCount": 3,
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                 "lastState": {"terminated": {"exitCode": 1, "finishedAt": finished}}}]}});
        let cells = print_pod(&pod, now);
        assert_eq!(
            cells,
            vec![
                json!("p"),
                json!("1/2"),
                json!("CrashLoopBackOff"),
                json!("3 (30s ago)"),
                json!("90s"),
                json!("10.1.0.5"),
                json!("<none>"),
                json!("<none>"),
                json!("<none>"),
            ]
        );
    }

    #[test]
    fn a_quota_shows_used_over_hard_by_resource_with_the_limits_apart() {
        let quota = json!({"metadata": {"name": "q"},
            "status": {"hard": {"pods": "10", "limits.cpu": "2", "requests.memory": "1Gi"},
                       "used": {"pods": "3", "requests.memory": "512Mi"}}});
        let cells = print_resource_quota(&quota, Utc::now());
        assert_eq!(cells[1], "pods: 3/10, requests.memory: 512Mi/1Gi");
        assert_eq!(cells[2], "limits.cpu: 0/2");
    }

    #[test]
    fn autoscaler_metrics_show_two_then_how_many_more() {
        let autoscaler = json!({"spec": {"metrics": [
            {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}}},
            {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "1Gi"}}},
            {"type": "Pods", "pods": {"target": {"type": "AverageValue", "averageValue": "1k"}}}]},
            "status": {"currentMetrics": [
                {"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 42}}}]}});
        assert_eq!(
            autoscaler_metrics(&autoscaler),
            "cpu: 42%/60%, memory: <unknown>/1Gi + 1 more..."
        );
        let legacy = json!({"spec": {"targetCPUUtilizationPercentage": 80}});
        assert_eq!(autoscaler_metrics(&legacy), "cpu: <unknown>/80%");
    }

    #[test]
    fn only_a_table_asked_for_first_is_a_table() {
        assert!(requested(Some(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
        )));
        assert!(!requested(Some("application/json")));
        assert!(!requested(Some(
            "application/json,application/json;as=Table;v=v1;g=meta.k8s.io"
        )));
    }

    #[test]
    fn custom_columns_print_strings_numbers_and_missing_values_as_the_crd_convertor_does() {
        let columns = vec![
            json!({"type": "string"}),
            json!({"type": "integer"}),
            json!({"type": "string"}),
        ];
        let paths = vec![
            ".status.conditions[0].type".to_string(),
            ".spec.size".to_string(),
            ".status.missing".to_string(),
        ];
        let obj = json!({"metadata": {"name": "m"}, "spec": {"size": 3},
                         "status": {"conditions": [{"type": "Ready"}]}});
        assert_eq!(
            custom_cells(&obj, &columns, &paths, Utc::now()),
            vec![json!("m"), json!("Ready"), json!(3), Value::Null]
        );
    }
}
