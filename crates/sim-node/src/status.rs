//! The pod status the kubelet reports: a small model of each container's state, from which
//! the phase, the conditions (with stable transition times) and the `status` JSON follow.
//! A pod's spec is followed too ([`follow_spec`]): the generation observed and, for in-place
//! resize (`pods/resize`), the resources each created container has, which this kubelet
//! actuates at once (it enforces no resources).

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

/// Condition types the kubelet owns; others (DisruptionTarget, readiness gates) are kept.
pub const KUBELET_CONDITIONS: &[&str] = &[
    "PodReadyToStartContainers",
    "Initialized",
    "ContainersReady",
    "Ready",
    "PodScheduled",
];

/// Kubernetes' timestamp format (RFC 3339, seconds).
pub fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// A container that has ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terminated {
    /// Exit code (128 + signal when killed).
    pub exit_code: i32,
    /// The signal, if killed by one.
    pub signal: Option<i32>,
    /// `Completed`, `Error`, `StartError`, …
    pub reason: String,
    /// A message (e.g. why it could not start).
    pub message: Option<String>,
    /// When it started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it ended.
    pub finished_at: DateTime<Utc>,
    /// Its container id.
    pub container_id: Option<String>,
}

impl Terminated {
    fn to_json(&self) -> Value {
        let mut t = json!({
            "exitCode": self.exit_code,
            "reason": self.reason,
            "startedAt": self.started_at.map(time),
            "finishedAt": time(self.finished_at),
        });
        if let Some(s) = self.signal {
            t["signal"] = json!(s);
        }
        if let Some(m) = &self.message {
            t["message"] = json!(m);
        }
        if let Some(id) = &self.container_id {
            t["containerID"] = json!(id);
        }
        t
    }
}

/// A container's current state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Not running: `ContainerCreating`, `PodInitializing`, `CrashLoopBackOff`, `CreateContainerConfigError`.
    Waiting {
        /// The reason.
        reason: String,
        /// A message.
        message: Option<String>,
    },
    /// Running since.
    Running {
        /// When it started.
        started_at: DateTime<Utc>,
    },
    /// Ended.
    Terminated(Terminated),
}

impl State {
    fn to_json(&self) -> Value {
        match self {
            Self::Waiting { reason, message } => {
                let mut w = json!({"reason": reason});
                if let Some(m) = message {
                    w["message"] = json!(m);
                }
                json!({"waiting": w})
            }
            Self::Running { started_at } => json!({"running": {"startedAt": time(*started_at)}}),
            Self::Terminated(t) => json!({"terminated": t.to_json()}),
        }
    }
}

/// One container's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerStatus {
    /// Container name.
    pub name: String,
    /// Its image.
    pub image: String,
    /// What the image resolved to.
    pub image_id: String,
    /// The current instance's id.
    pub container_id: Option<String>,
    /// Current state.
    pub state: State,
    /// The previous instance's end.
    pub last_state: Option<Terminated>,
    /// Whether it passes readiness.
    pub ready: bool,
    /// Whether it passed its startup probe (or has none) and runs.
    pub started: bool,
    /// How often it was restarted.
    pub restart_count: i32,
    /// Whether it will never run again (policy says so, or the pod is terminating).
    pub done: bool,
    /// Whether it ever started (a first instance ran).
    pub ever_started: bool,
}

impl ContainerStatus {
    /// A container that has not started yet.
    pub fn waiting(name: &str, image: &str, reason: &str) -> Self {
        Self {
            name: name.to_string(),
            image: image.to_string(),
            image_id: String::new(),
            container_id: None,
            state: State::Waiting {
                reason: reason.to_string(),
                message: None,
            },
            last_state: None,
            ready: false,
            started: false,
            restart_count: 0,
            done: false,
            ever_started: false,
        }
    }

    fn succeeded(&self) -> bool {
        matches!(&self.state, State::Terminated(t) if t.exit_code == 0)
    }

    fn to_json(&self) -> Value {
        let mut c = json!({
            "name": self.name,
            "image": self.image,
            "imageID": self.image_id,
            "state": self.state.to_json(),
            "lastState": self.last_state.as_ref().map_or(json!({}), |t| json!({"terminated": t.to_json()})),
            "ready": self.ready,
            "restartCount": self.restart_count,
            "started": self.started,
        });
        if let Some(id) = &self.container_id {
            c["containerID"] = json!(id);
        }
        c
    }
}

/// Why and when the kubelet evicted a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    /// The pod's `status.message` (e.g. "The node was low on resource: memory.").
    pub message: String,
    /// When it was evicted.
    pub at: DateTime<Utc>,
}

/// The condition the kubelet adds to a pod it evicts, as `(type, reason)`.
pub const EVICTED_CONDITION: (&str, &str) = ("DisruptionTarget", "TerminationByKubelet");

/// What the kubelet knows about one pod's status.
#[derive(Debug, Clone)]
pub struct PodStatus {
    /// The pod IP.
    pub pod_ip: String,
    /// The node IP.
    pub host_ip: String,
    /// When the kubelet accepted the pod.
    pub start_time: DateTime<Utc>,
    /// Init containers, in order.
    pub init_containers: Vec<ContainerStatus>,
    /// App containers.
    pub containers: Vec<ContainerStatus>,
    /// Ephemeral containers, in the order they were added: never ready, never restarted,
    /// and of no account for the phase or the conditions.
    pub ephemeral_containers: Vec<ContainerStatus>,
    /// Whether the sandbox (IP, proxy, files) is set up.
    pub sandbox_ready: bool,
    /// The pod's readiness gates (condition types that must also be True for Ready).
    pub readiness_gates: Vec<String>,
    /// The QoS class.
    pub qos_class: String,
    /// Set when the pod was evicted: the phase is `Failed` with reason `Evicted` once its
    /// containers have stopped.
    pub eviction: Option<Eviction>,
    /// Condition type → (status, lastTransitionTime), kept stable across updates.
    transitions: BTreeMap<String, (String, String)>,
}

impl PodStatus {
    /// A fresh status for a pod just accepted.
    pub fn new(pod_ip: String, host_ip: String) -> Self {
        Self {
            pod_ip,
            host_ip,
            start_time: Utc::now(),
            init_containers: Vec::new(),
            containers: Vec::new(),
            ephemeral_containers: Vec::new(),
            sandbox_ready: false,
            readiness_gates: Vec::new(),
            qos_class: "BestEffort".into(),
            eviction: None,
            transitions: BTreeMap::new(),
        }
    }

    /// Whether every init container has completed.
    pub fn initialized(&self) -> bool {
        self.init_containers.iter().all(|c| c.done && c.succeeded())
    }

    /// Whether every container, init and ephemeral containers included, will never run
    /// again.
    fn all_done(&self) -> bool {
        self.init_containers
            .iter()
            .chain(&self.containers)
            .chain(&self.ephemeral_containers)
            .all(|c| c.done)
    }

    /// The eviction, once the containers of an evicted pod have all stopped: from then on
    /// the pod is `Failed` with reason `Evicted`.
    fn evicted(&self) -> Option<&Eviction> {
        self.eviction.as_ref().filter(|_| self.all_done())
    }

    /// The pod phase.
    pub fn phase(&self) -> &'static str {
        if self.evicted().is_some() {
            return "Failed";
        }
        let init_failed = self
            .init_containers
            .iter()
            .any(|c| c.done && !c.succeeded());
        if init_failed {
            return "Failed";
        }
        if !self.initialized() {
            return "Pending";
        }
        if !self.containers.is_empty() && self.containers.iter().all(|c| c.done) {
            return if self.containers.iter().all(ContainerStatus::succeeded) {
                "Succeeded"
            } else {
                "Failed"
            };
        }
        if self.containers.iter().all(|c| c.ever_started) && !self.containers.is_empty() {
            "Running"
        } else {
            "Pending"
        }
    }

    /// Whether the pod has reached Succeeded or Failed.
    pub fn terminal(&self) -> bool {
        matches!(self.phase(), "Succeeded" | "Failed")
    }

    fn unready(&self) -> Vec<&str> {
        self.containers
            .iter()
            .filter(|c| !c.ready)
            .map(|c| c.name.as_str())
            .collect()
    }

    /// The conditions this kubelet owns, with stable transition times. `others` are the
    /// pod's other conditions (for readiness gates); `scheduled_at` is PodScheduled's
    /// transition time when the scheduler set one.
    pub fn conditions(&mut self, others: &[Value], scheduled_at: Option<String>) -> Vec<Value> {
        let now = time(Utc::now());
        let phase = self.phase();
        let terminal = matches!(phase, "Succeeded" | "Failed");
        let unready = self.unready();
        let containers_ready = unready.is_empty() && !terminal;
        let gates_ok = self.readiness_gates.iter().all(|gate| {
            others
                .iter()
                .any(|c| c["type"] == gate.as_str() && c["status"] == "True")
        });
        let not_ready = |what: &str| -> (Option<String>, Option<String>) {
            if terminal {
                (Some("PodCompleted".into()), None)
            } else if unready.is_empty() {
                (
                    Some("ReadinessGatesNotReady".into()),
                    Some("corresponding condition of pod readiness gate is not true".into()),
                )
            } else {
                (
                    Some(format!("{what}NotReady")),
                    Some(format!(
                        "containers with unready status: [{}]",
                        unready.join(" ")
                    )),
                )
            }
        };
        let uninitialized: Vec<&str> = self
            .init_containers
            .iter()
            .filter(|c| !(c.done && c.succeeded()))
            .map(|c| c.name.as_str())
            .collect();
        let mut wanted: Vec<(&str, bool, Option<String>, Option<String>)> = vec![
            (
                "PodReadyToStartContainers",
                self.sandbox_ready && !terminal,
                None,
                None,
            ),
            (
                "Initialized",
                self.initialized(),
                (!self.initialized()).then(|| "ContainersNotInitialized".to_string()),
                (!self.initialized()).then(|| {
                    format!(
                        "containers with incomplete status: [{}]",
                        uninitialized.join(" ")
                    )
                }),
            ),
        ];
        let (reason, message) = if containers_ready {
            (None, None)
        } else {
            not_ready("Containers")
        };
        wanted.push(("ContainersReady", containers_ready, reason, message));
        let ready = containers_ready && gates_ok;
        let (reason, message) = if ready {
            (None, None)
        } else if containers_ready {
            not_ready("")
        } else {
            not_ready("Containers")
        };
        wanted.push(("Ready", ready, reason, message));
        wanted.push(("PodScheduled", true, None, None));
        wanted
            .into_iter()
            .map(|(kind, ok, reason, message)| {
                let status = if ok { "True" } else { "False" };
                let transition = match self.transitions.get(kind) {
                    Some((s, t)) if s == status => t.clone(),
                    _ => match (kind, &scheduled_at) {
                        ("PodScheduled", Some(t)) => t.clone(),
                        _ => now.clone(),
                    },
                };
                self.transitions
                    .insert(kind.to_string(), (status.to_string(), transition.clone()));
                let mut c = json!({"type": kind, "status": status,
                                   "lastProbeTime": null, "lastTransitionTime": transition});
                if let Some(r) = reason {
                    c["reason"] = json!(r);
                }
                if let Some(m) = message {
                    c["message"] = json!(m);
                }
                c
            })
            .collect()
    }

    /// The pod's `status` as JSON. `current` is the pod's current status (its other
    /// conditions are kept).
    pub fn to_json(&mut self, current: &Value) -> Value {
        let others: Vec<Value> = current["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| {
                !c["type"]
                    .as_str()
                    .is_some_and(|t| KUBELET_CONDITIONS.contains(&t))
            })
            .cloned()
            .collect();
        let scheduled_at = current["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "PodScheduled" && c["status"] == "True")
            .and_then(|c| c["lastTransitionTime"].as_str().map(str::to_string));
        let mut conditions = self.conditions(&others, scheduled_at);
        let evicted = self.evicted().cloned();
        if let Some(e) = &evicted {
            let (kind, reason) = EVICTED_CONDITION;
            conditions.push(json!({
                "type": kind, "status": "True", "reason": reason, "message": e.message,
                "lastProbeTime": null, "lastTransitionTime": time(e.at),
            }));
        }
        conditions.extend(
            others
                .into_iter()
                .filter(|c| evicted.is_none() || c["type"] != EVICTED_CONDITION.0),
        );
        let mut status = json!({
            "phase": self.phase(),
            "conditions": conditions,
            "hostIP": self.host_ip,
            "hostIPs": [{"ip": self.host_ip}],
            "startTime": time(self.start_time),
            "containerStatuses": self.containers.iter().map(ContainerStatus::to_json).collect::<Vec<_>>(),
            "qosClass": self.qos_class,
        });
        if let Some(e) = &evicted {
            status["reason"] = json!("Evicted");
            status["message"] = json!(e.message);
        }
        if !self.pod_ip.is_empty() {
            status["podIP"] = json!(self.pod_ip);
            status["podIPs"] = json!([{"ip": self.pod_ip}]);
        }
        if !self.init_containers.is_empty() {
            status["initContainerStatuses"] = json!(
                self.init_containers
                    .iter()
                    .map(ContainerStatus::to_json)
                    .collect::<Vec<_>>()
            );
        }
        if !self.ephemeral_containers.is_empty() {
            // The prober, which sets `started`, knows nothing of ephemeral containers.
            let ephemeral: Vec<Value> = self
                .ephemeral_containers
                .iter()
                .map(|c| {
                    let mut c = c.to_json();
                    if let Some(o) = c.as_object_mut() {
                        o.remove("started");
                    }
                    c
                })
                .collect();
            status["ephemeralContainerStatuses"] = json!(ephemeral);
        }
        for key in ["nominatedNodeName", "resize", "resourceClaimStatuses"] {
            if let Some(v) = current.get(key) {
                status[key] = v.clone();
            }
        }
        status
    }
}

/// The QoS class of a pod spec (Guaranteed, Burstable or BestEffort).
pub fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .flat_map(|k| spec[*k].as_array().into_iter().flatten())
        .collect();
    let has = |c: &Value, kind: &str| {
        c["resources"][kind]
            .as_object()
            .is_some_and(|m| m.contains_key("cpu") || m.contains_key("memory"))
    };
    if containers
        .iter()
        .all(|c| !has(c, "requests") && !has(c, "limits"))
    {
        return "BestEffort";
    }
    let guaranteed = containers.iter().all(|c| {
        ["cpu", "memory"].iter().all(|r| {
            let limit = &c["resources"]["limits"][*r];
            let request = &c["resources"]["requests"][*r];
            !limit.is_null() && (request.is_null() || request == limit)
        })
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// What kubelet 1.34 reports of the pod spec it acts on, added to the `status` JSON built
/// for `pod`: `observedGeneration` (the pod's generation, on the status and on each condition
/// the kubelet owns), and for each container the
/// runtime has created (it has a `containerID`) its `resources` (the requests and limits
/// allocated to it: the spec's, as this kubelet admits every resize at once and actuates it
/// at once, with no `PodResizePending` or `PodResizeInProgress` condition left) and
/// `allocatedResources` (the allocated requests).
pub fn follow_spec(status: &mut Value, pod: &Value) {
    if let Some(generation) = pod["metadata"]["generation"].as_i64() {
        status["observedGeneration"] = json!(generation);
        let conditions = status.get_mut("conditions").and_then(Value::as_array_mut);
        for condition in conditions.into_iter().flatten().filter(|c| {
            c["type"]
                .as_str()
                .is_some_and(|t| KUBELET_CONDITIONS.contains(&t))
        }) {
            condition["observedGeneration"] = json!(generation);
        }
    }
    for (list, statuses) in [
        ("containers", "containerStatuses"),
        ("initContainers", "initContainerStatuses"),
    ] {
        let Some(entries) = status.get_mut(statuses).and_then(Value::as_array_mut) else {
            continue;
        };
        for entry in entries
            .iter_mut()
            .filter(|e| e.get("containerID").is_some())
        {
            let Some(spec) = pod["spec"][list]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["name"] == entry["name"])
            else {
                continue;
            };
            let mut resources = serde_json::Map::new();
            for kind in ["limits", "requests"] {
                if let Some(list) = spec["resources"][kind]
                    .as_object()
                    .filter(|l| !l.is_empty())
                {
                    resources.insert(kind.to_string(), Value::Object(list.clone()));
                }
            }
            if let Some(requests) = resources.get("requests") {
                entry["allocatedResources"] = requests.clone();
            }
            entry["resources"] = Value::Object(resources);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(name: &str) -> ContainerStatus {
        let mut c = ContainerStatus::waiting(name, "img", "ContainerCreating");
        c.state = State::Running {
            started_at: Utc::now(),
        };
        c.ever_started = true;
        c.started = true;
        c
    }

    fn terminated(name: &str, code: i32) -> ContainerStatus {
        let mut c = running(name);
        c.state = State::Terminated(Terminated {
            exit_code: code,
            signal: None,
            reason: if code == 0 { "Completed" } else { "Error" }.into(),
            message: None,
            started_at: None,
            finished_at: Utc::now(),
            container_id: None,
        });
        c.done = true;
        c
    }

    #[test]
    fn the_phase_follows_the_containers() {
        let mut s = PodStatus::new("127.101.0.1".into(), "127.0.10.1".into());
        s.containers = vec![ContainerStatus::waiting("a", "img", "ContainerCreating")];
        assert_eq!(s.phase(), "Pending");
        s.containers = vec![running("a"), terminated("b", 0)];
        assert_eq!(s.phase(), "Running");
        s.containers = vec![terminated("a", 0), terminated("b", 0)];
        assert_eq!(s.phase(), "Succeeded");
        s.containers = vec![terminated("a", 0), terminated("b", 2)];
        assert_eq!(s.phase(), "Failed");
        s.init_containers = vec![ContainerStatus::waiting("i", "img", "PodInitializing")];
        s.containers = vec![ContainerStatus::waiting("a", "img", "PodInitializing")];
        assert_eq!(s.phase(), "Pending");
        s.init_containers = vec![terminated("i", 1)];
        assert_eq!(s.phase(), "Failed");
    }

    #[test]
    fn readiness_conditions_name_the_unready_containers_and_keep_transition_times() {
        let mut s = PodStatus::new("127.101.0.1".into(), "127.0.10.1".into());
        s.sandbox_ready = true;
        let mut a = running("a");
        a.ready = true;
        s.containers = vec![a, running("b")];
        let first = s.to_json(&json!({}));
        let ready = |v: &Value| {
            v["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == "Ready")
                .unwrap()
                .clone()
        };
        assert_eq!(ready(&first)["status"], "False");
        assert_eq!(
            ready(&first)["message"],
            "containers with unready status: [b]"
        );
        let again = s.to_json(&json!({}));
        assert_eq!(
            ready(&first)["lastTransitionTime"],
            ready(&again)["lastTransitionTime"]
        );
        s.containers[1].ready = true;
        let other = json!({"conditions": [{"type": "DisruptionTarget", "status": "True"}]});
        let now = s.to_json(&other);
        assert_eq!(ready(&now)["status"], "True");
        assert!(
            now["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["type"] == "DisruptionTarget")
        );
        assert_eq!(now["phase"], "Running");
        assert_eq!(now["podIP"], "127.101.0.1");
    }

    #[test]
    fn an_evicted_pod_is_failed_with_reason_evicted_once_its_containers_stopped() {
        let mut s = PodStatus::new("127.101.0.1".into(), "127.0.10.1".into());
        s.sandbox_ready = true;
        let mut a = running("a");
        a.ready = true;
        s.containers = vec![a];
        s.eviction = Some(Eviction {
            message: "The node was low on resource: memory.".into(),
            at: Utc::now(),
        });
        let stopping = s.to_json(&json!({}));
        assert_eq!(stopping["phase"], "Running", "its container still runs");
        assert!(stopping.get("reason").is_none());
        // Failed, not Succeeded, even when its containers exited 0 on their way out.
        s.containers = vec![terminated("a", 0)];
        let earlier = json!({"conditions": [
            {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"},
        ]});
        let evicted = s.to_json(&earlier);
        assert_eq!(evicted["phase"], "Failed");
        assert_eq!(evicted["reason"], "Evicted");
        assert_eq!(evicted["message"], "The node was low on resource: memory.");
        let conditions = evicted["conditions"].as_array().unwrap();
        let of = |kind: &str| -> Vec<&Value> {
            conditions.iter().filter(|c| c["type"] == kind).collect()
        };
        assert_eq!(of("DisruptionTarget").len(), 1, "{conditions:?}");
        assert_eq!(of("DisruptionTarget")[0]["status"], "True");
        assert_eq!(
            of("DisruptionTarget")[0]["message"],
            "The node was low on resource: memory."
        );
        assert_eq!(of("Ready")[0]["status"], "False");
        assert_eq!(of("Ready")[0]["reason"], "PodCompleted");
        assert!(s.terminal());
    }

    #[test]
    fn ephemeral_containers_are_reported_apart_and_leave_phase_and_readiness_alone() {
        let mut s = PodStatus::new("127.101.0.1".into(), "127.0.10.1".into());
        s.sandbox_ready = true;
        let mut a = running("a");
        a.ready = true;
        s.containers = vec![a];
        s.ephemeral_containers = vec![terminated("debugger", 3)];
        let json = s.to_json(&json!({}));
        assert_eq!(json["phase"], "Running");
        let ready = json["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap();
        assert_eq!(ready["status"], "True");
        let debugger = &json["ephemeralContainerStatuses"][0];
        assert_eq!(debugger["name"], "debugger");
        assert_eq!(debugger["state"]["terminated"]["exitCode"], 3);
        assert_eq!(debugger["ready"], false);
        assert_eq!(debugger["restartCount"], 0);
        assert!(debugger.get("started").is_none(), "{debugger}");
        assert_eq!(json["containerStatuses"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn qos_classes_follow_requests_and_limits() {
        assert_eq!(qos_class(&json!({"containers": [{}]})), "BestEffort");
        assert_eq!(
            qos_class(&json!({"containers": [{"resources": {"requests": {"cpu": "1"}}}]})),
            "Burstable"
        );
        assert_eq!(
            qos_class(
                &json!({"containers": [{"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]})
            ),
            "Guaranteed"
        );
    }
}
