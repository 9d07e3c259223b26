//! The `Memcached` custom resource (`cache.example.com/v1alpha1`) and its status conditions.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The finalizer this operator puts on every Memcached it manages.
pub const FINALIZER: &str = "cache.example.com/finalizer";

/// Desired state of a memcached cluster.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[kube(
    group = "cache.example.com",
    version = "v1alpha1",
    kind = "Memcached",
    plural = "memcacheds",
    singular = "memcached",
    namespaced,
    status = "MemcachedStatus",
    derive = "PartialEq",
    doc = "A memcached cluster managed by memcached-operator: a Deployment of `size` memcached pods.",
    printcolumn(
        name = "Size",
        type_ = "integer",
        json_path = ".spec.size",
        description = "desired number of memcached pods"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Available\")].status",
        description = "whether all desired memcached pods are available"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MemcachedSpec {
    /// Number of memcached pods (0 to 100).
    #[schemars(range(min = 0, max = 100))]
    pub size: i32,
}

/// Observed state of a memcached cluster.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemcachedStatus {
    /// Names of the memcached pods, sorted.
    #[serde(default)]
    pub nodes: Vec<String>,
    /// Standard conditions: Available, Progressing, Degraded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// A status condition in the shape of `metav1.Condition`.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type: `Available`, `Progressing` or `Degraded`.
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

impl Memcached {
    /// The desired size, never negative.
    #[must_use]
    pub fn size(&self) -> i32 {
        self.spec.size.max(0)
    }

    /// Whether the object carries this operator's finalizer.
    #[must_use]
    pub fn has_finalizer(&self) -> bool {
        self.metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|x| x == FINALIZER))
    }

    /// Whether deletion has started (a deletionTimestamp is set).
    #[must_use]
    pub fn is_deleting(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }
}

/// Test fixtures: builders on the real type.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;
    use k8s_openapi::jiff::Timestamp;
    use kube::api::ObjectMeta;

    impl Memcached {
        /// A Memcached `test` in namespace `default`, size 3, generation 1, not yet finalized.
        pub(crate) fn test() -> Self {
            let mut m = Memcached::new("test", MemcachedSpec { size: 3 });
            m.metadata = ObjectMeta {
                name: Some("test".into()),
                namespace: Some("default".into()),
                uid: Some("5a1c5e0e-0000-4000-8000-00000000cafe".into()),
                generation: Some(1),
                resource_version: Some("1".into()),
                ..ObjectMeta::default()
            };
            m
        }

        /// The same object with another size (and the next generation).
        pub(crate) fn with_size(mut self, size: i32) -> Self {
            self.spec.size = size;
            self.metadata.generation = Some(self.metadata.generation.unwrap_or(0) + 1);
            self
        }

        /// The same object carrying our finalizer.
        pub(crate) fn finalized(mut self) -> Self {
            self.metadata.finalizers = Some(vec![FINALIZER.into()]);
            self
        }

        /// The same object with deletion started.
        pub(crate) fn deleting(mut self) -> Self {
            self.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
            self
        }

        /// The same object with the given status.
        pub(crate) fn with_status(mut self, status: MemcachedStatus) -> Self {
            self.status = Some(status);
            self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    #[test]
    fn the_crd_is_namespaced_with_a_status_subresource_and_printer_columns() {
        let crd = Memcached::crd();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("memcacheds.cache.example.com")
        );
        assert_eq!(crd.spec.scope, "Namespaced");
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha1");
        assert!(
            version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some()
        );
        let columns: Vec<_> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(columns, ["Size", "Ready", "Age"]);
    }

    #[test]
    fn the_schema_requires_size_between_zero_and_one_hundred() {
        let crd = serde_json::to_value(Memcached::crd()).unwrap();
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(spec["required"], serde_json::json!(["size"]));
        assert_eq!(spec["properties"]["size"]["minimum"].as_f64(), Some(0.0));
        assert_eq!(spec["properties"]["size"]["maximum"].as_f64(), Some(100.0));
        assert_eq!(spec["properties"]["size"]["format"], "int32");
    }

    #[test]
    fn the_finalizer_and_deletion_helpers_read_the_metadata() {
        let m = Memcached::test();
        assert!(!m.has_finalizer() && !m.is_deleting());
        let m = m.finalized().deleting();
        assert!(m.has_finalizer() && m.is_deleting());
    }
}
