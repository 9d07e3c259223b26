//! The kind configuration a run creates its cluster with: the repository's
//! `kind-config.yaml` with every relative `extraMounts` host path made absolute (relative
//! to the file's directory) and the control plane's audit log directory moved to a
//! directory of the run's own, so that the harness can follow the API server's audit log
//! as a plain file on this machine.

use std::path::{Path, PathBuf};

use serde_yaml::Value;

use super::KindError;

/// Where kube-apiserver writes its audit log inside the control-plane node (the
/// `audit-log-path` of `kind-config.yaml`).
pub const AUDIT_DIR_IN_NODE: &str = "/var/log/kubernetes";

/// The audit log's file name in that directory.
pub const AUDIT_LOG_FILE: &str = "kube-apiserver-audit.log";

/// The configuration text, and whether its control plane mounts the audit directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// The YAML to give `kind create cluster --config`.
    pub yaml: String,
    /// Whether the control plane's [`AUDIT_DIR_IN_NODE`] is now the run's audit directory.
    pub audit: bool,
}

/// Rewrites the kind configuration at `template` for a run whose audit log directory on
/// this machine is `audit_dir`.
///
/// # Errors
/// When the file cannot be read or is not a kind `Cluster` configuration.
pub fn cluster_config(template: &Path, audit_dir: &Path) -> Result<ClusterConfig, KindError> {
    let config_error = |why: String| KindError::Config {
        path: template.display().to_string(),
        why,
    };
    let text = std::fs::read_to_string(template).map_err(|e| config_error(e.to_string()))?;
    let mut config: Value = serde_yaml::from_str(&text).map_err(|e| config_error(e.to_string()))?;
    if config.get("kind").and_then(Value::as_str) != Some("Cluster") {
        return Err(config_error(
            "it is not a kind `Cluster` configuration".into(),
        ));
    }
    let base = template
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let base = std::path::absolute(&base).unwrap_or(base);
    let mut audit = false;
    let nodes = config
        .get_mut("nodes")
        .and_then(Value::as_sequence_mut)
        .map(|n| n.as_mut_slice())
        .unwrap_or_default();
    for node in nodes {
        let control_plane = node.get("role").and_then(Value::as_str) == Some("control-plane");
        let mounts = node
            .get_mut("extraMounts")
            .and_then(Value::as_sequence_mut)
            .map(|m| m.as_mut_slice())
            .unwrap_or_default();
        for mount in mounts {
            let in_node = mount.get("containerPath").and_then(Value::as_str);
            let host = if control_plane && in_node == Some(AUDIT_DIR_IN_NODE) {
                audit = true;
                Some(audit_dir.to_path_buf())
            } else {
                mount
                    .get("hostPath")
                    .and_then(Value::as_str)
                    .map(|p| base.join(p.strip_prefix("./").unwrap_or(p)))
            };
            if let (Some(host), Some(map)) = (host, mount.as_mapping_mut()) {
                map.insert("hostPath".into(), Value::String(host.display().to_string()));
            }
        }
    }
    let yaml = serde_yaml::to_string(&config).map_err(|e| config_error(e.to_string()))?;
    Ok(ClusterConfig { yaml, audit })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_mounts_become_absolute_and_the_audit_directory_is_the_runs() {
        let dir = tempfile::tempdir().unwrap();
        let template = dir.path().join("kind-config.yaml");
        std::fs::write(
            &template,
            "kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nnodes:\n- role: control-plane\n  extraMounts:\n  - hostPath: ./ci/kind/audit-policy.yaml\n    containerPath: /etc/kubernetes/policies/audit-policy.yaml\n  - hostPath: ./target/kind-audit\n    containerPath: /var/log/kubernetes\n  - hostPath: /abs\n    containerPath: /x\n- role: worker\n",
        )
        .unwrap();
        let c = cluster_config(&template, Path::new("/run/audit")).unwrap();
        assert!(c.audit);
        let v: Value = serde_yaml::from_str(&c.yaml).unwrap();
        let mounts = &v["nodes"][0]["extraMounts"];
        assert_eq!(
            mounts[0]["hostPath"].as_str().unwrap(),
            dir.path()
                .join("ci/kind/audit-policy.yaml")
                .display()
                .to_string()
        );
        assert_eq!(mounts[1]["hostPath"].as_str().unwrap(), "/run/audit");
        assert_eq!(mounts[2]["hostPath"].as_str().unwrap(), "/abs");
        assert_eq!(v["nodes"][1]["role"].as_str().unwrap(), "worker");
    }

    #[test]
    fn a_configuration_without_the_audit_mount_says_so_and_other_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain.yaml");
        std::fs::write(
            &plain,
            "kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\n",
        )
        .unwrap();
        assert!(!cluster_config(&plain, Path::new("/a")).unwrap().audit);
        let other = dir.path().join("other.yaml");
        std::fs::write(&other, "kind: Pod\n").unwrap();
        let e = cluster_config(&other, Path::new("/a"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("other.yaml") && e.contains("not a kind `Cluster`"),
            "{e}"
        );
    }
}
