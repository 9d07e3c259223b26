//! The custom resources (`workloads.example.com/v1alpha1`): a `Store`, run as a
//! StatefulSet with a volume per replica, and a `Batch`, run as a Job; their status
//! conditions.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of both resources.
pub const GROUP: &str = "workloads.example.com";

/// A store: `replicas` busybox pods, each writing its name into a volume of its own and
/// serving that volume, Ready once the file is there.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[kube(
    group = "workloads.example.com",
    version = "v1alpha1",
    kind = "Store",
    plural = "stores",
    namespaced,
    status = "StoreStatus",
    derive = "PartialEq",
    doc = "A StatefulSet of busybox pods, each with a volume of its own at /data.",
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct StoreSpec {
    /// Number of pods (0 to 10).
    #[schemars(range(min = 0, max = 10))]
    pub replicas: i32,
    /// The size each pod's volume asks for.
    #[serde(default = "default_storage")]
    pub storage: String,
}

fn default_storage() -> String {
    "1Gi".into()
}

/// What the StatefulSet of a store reports.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StoreStatus {
    /// Pods of the StatefulSet that are Ready.
    #[serde(default)]
    pub ready_replicas: i32,
    /// `Ready`: all replicas of the current generation are Ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// A batch: a shell command run to completion by `completions` busybox pods,
/// `parallelism` at a time.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[kube(
    group = "workloads.example.com",
    version = "v1alpha1",
    kind = "Batch",
    plural = "batches",
    namespaced,
    status = "BatchStatus",
    derive = "PartialEq",
    doc = "A Job of busybox pods running one shell command to completion.",
    printcolumn(name = "Succeeded", type_ = "integer", json_path = ".status.succeeded")
)]
#[serde(rename_all = "camelCase")]
pub struct BatchSpec {
    /// The command, run by `sh -c`.
    pub command: String,
    /// Pods that must succeed.
    #[schemars(range(min = 1, max = 100))]
    pub completions: i32,
    /// Pods run at once.
    #[schemars(range(min = 1, max = 100))]
    pub parallelism: i32,
}

/// What the Job of a batch reports.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchStatus {
    /// Pods of the Job that succeeded.
    #[serde(default)]
    pub succeeded: i32,
    /// Pods of the Job that failed.
    #[serde(default)]
    pub failed: i32,
    /// `Complete` or `Failed`, as the Job's own condition says.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// A status condition in the shape of `metav1.Condition`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    #[schemars(extend("enum" = ["True", "False", "Unknown"]))]
    pub status: String,
    /// The `.metadata.generation` the condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When the status last changed.
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub last_transition_time: Time,
    /// CamelCase reason for the condition's last transition.
    pub reason: String,
    /// Human-readable details.
    #[serde(default)]
    pub message: String,
}

impl Condition {
    /// A condition of `type_` with `status`, `reason` and `message`, observed at
    /// `generation`, which keeps the transition time of `previous`'s condition of the
    /// same type when its status is unchanged (else now).
    #[must_use]
    pub fn next(
        previous: &[Condition],
        type_: &str,
        status: bool,
        reason: &str,
        message: String,
        generation: Option<i64>,
    ) -> Self {
        let status = if status { "True" } else { "False" }.to_string();
        let last_transition_time = previous
            .iter()
            .find(|c| c.type_ == type_ && c.status == status)
            .map_or_else(
                || Time(k8s_openapi::jiff::Timestamp::now()),
                |c| c.last_transition_time.clone(),
            );
        Condition {
            type_: type_.into(),
            status,
            observed_generation: generation,
            last_transition_time,
            reason: reason.into(),
            message,
        }
    }
}

/// Both CRDs as one multi-document YAML (the source of
/// `config/crd/workloads.example.com.yaml`).
///
/// # Errors
/// Only if serialization fails (it does not for these types).
pub fn crds_yaml() -> Result<String, serde_yaml::Error> {
    use kube::CustomResourceExt as _;
    Ok(format!(
        "{}---\n{}",
        serde_yaml::to_string(&Store::crd())?,
        serde_yaml::to_string(&Batch::crd())?
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt as _;

    #[test]
    fn both_crds_are_namespaced_in_one_group_with_a_status_subresource() {
        for crd in [Store::crd(), Batch::crd()] {
            assert_eq!(crd.spec.group, GROUP);
            assert_eq!(crd.spec.scope, "Namespaced");
            let version = &crd.spec.versions[0];
            assert!(
                version
                    .subresources
                    .as_ref()
                    .and_then(|s| s.status.as_ref())
                    .is_some()
            );
        }
        assert_eq!(
            Store::crd().metadata.name.as_deref(),
            Some("stores.workloads.example.com")
        );
        assert_eq!(
            Batch::crd().metadata.name.as_deref(),
            Some("batches.workloads.example.com")
        );
    }

    #[test]
    fn a_condition_keeps_its_transition_time_while_its_status_holds() {
        let first = Condition::next(&[], "Ready", false, "Waiting", "0 of 2".into(), Some(1));
        let same = Condition::next(
            std::slice::from_ref(&first),
            "Ready",
            false,
            "Waiting",
            "1 of 2".into(),
            Some(1),
        );
        assert_eq!(same.last_transition_time, first.last_transition_time);
        assert_eq!(same.message, "1 of 2");
        let flipped = Condition::next(&[same], "Ready", true, "AllReady", String::new(), Some(1));
        assert_eq!(flipped.status, "True");
        assert!(flipped.last_transition_time.0 >= first.last_transition_time.0);
    }
}
