//! The manifests under `config/`: the committed CRD matches the Rust type, and the
//! Deployment and RBAC say what the operator needs (and no more).

use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};
use serde::Deserialize;
use serde::de::DeserializeOwned;

fn config(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("config")
        .join(rel)
}

/// The documents of kind `kind` in `file`.
fn docs<T: DeserializeOwned>(file: &str, kind: &str) -> Vec<T> {
    let text = std::fs::read_to_string(config(file)).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde_yaml::Value::deserialize(d).unwrap())
        .filter(|v| v["kind"].as_str() == Some(kind))
        .map(|v| serde_yaml::from_value(v).unwrap())
        .collect()
}

fn allows(rules: &[PolicyRule], group: &str, resource: &str, verb: &str) -> bool {
    rules.iter().any(|r| {
        r.api_groups.iter().flatten().any(|g| g == group)
            && r.resources.iter().flatten().any(|x| x == resource)
            && r.verbs.iter().any(|v| v == verb)
    })
}

#[test]
fn the_committed_crd_is_what_crdgen_prints() {
    let committed =
        std::fs::read_to_string(config("crd/cache.example.com_memcacheds.yaml")).unwrap();
    assert!(
        committed == memcached_operator::crd_yaml().unwrap(),
        "config/crd is stale: run `cargo run -q -p memcached-operator --bin crdgen > operator/config/crd/cache.example.com_memcacheds.yaml`"
    );
}

#[test]
fn every_manifest_document_has_api_version_kind_and_name() {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(&config(""), &mut files);
    assert!(files.len() >= 8);
    for f in files {
        assert_eq!(
            f.extension().and_then(|e| e.to_str()),
            Some("yaml"),
            "{}",
            f.display()
        );
        let text = std::fs::read_to_string(&f).unwrap();
        for d in serde_yaml::Deserializer::from_str(&text) {
            let v = serde_yaml::Value::deserialize(d).unwrap();
            for field in ["apiVersion", "kind"] {
                assert!(
                    v[field].as_str().is_some_and(|s| !s.is_empty()),
                    "{} lacks {field}",
                    f.display()
                );
            }
            assert!(
                v["metadata"]["name"].as_str().is_some(),
                "{} lacks metadata.name",
                f.display()
            );
        }
    }
}

#[test]
fn the_deployment_runs_two_replicas_wired_through_the_downward_api() {
    let d: Deployment = docs("manager/manager.yaml", "Deployment").remove(0);
    assert_eq!(d.metadata.name.as_deref(), Some("memcached-operator"));
    let spec = d.spec.unwrap();
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.unwrap();
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("memcached-operator")
    );
    let c = &pod.containers[0];
    assert_eq!(c.image.as_deref(), Some("memcached-operator:dev"));
    let env: Vec<(String, String)> = c
        .env
        .iter()
        .flatten()
        .map(|e| {
            let path = e
                .value_from
                .as_ref()
                .and_then(|v| v.field_ref.as_ref())
                .map(|f| f.field_path.clone());
            (e.name.clone(), path.unwrap_or_default())
        })
        .collect();
    for (name, path) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
        ("POD_IP", "status.podIP"),
    ] {
        assert!(
            env.contains(&(name.into(), path.into())),
            "{name} from {path} missing in {env:?}"
        );
    }
    let args = c.args.clone().unwrap();
    assert!(
        args.contains(&"--metrics-bind-address=$(POD_IP):8080".to_owned()),
        "{args:?}"
    );
    assert!(
        args.contains(&"--health-probe-bind-address=$(POD_IP):8081".to_owned()),
        "{args:?}"
    );
    let live = c
        .liveness_probe
        .as_ref()
        .and_then(|p| p.http_get.as_ref())
        .unwrap();
    let ready = c
        .readiness_probe
        .as_ref()
        .and_then(|p| p.http_get.as_ref())
        .unwrap();
    assert_eq!(
        (live.path.as_deref(), ready.path.as_deref()),
        (Some("/healthz"), Some("/readyz"))
    );
    let sc = c.security_context.as_ref().unwrap();
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(
        sc.capabilities.as_ref().and_then(|c| c.drop.clone()),
        Some(vec!["ALL".to_owned()])
    );
    let requests = c
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .unwrap();
    assert!(requests.contains_key("cpu") && requests.contains_key("memory"));
}

#[test]
fn the_namespaced_role_grants_exactly_what_the_elections_and_the_registry_use() {
    let role: Role = docs("rbac/leader_election_role.yaml", "Role").remove(0);
    let rules = role.rules.unwrap();
    for verb in ["get", "list", "watch", "create", "update"] {
        assert!(
            allows(&rules, "coordination.k8s.io", "leases", verb),
            "leases {verb}"
        );
    }
    for verb in ["get", "list", "watch", "create", "patch"] {
        assert!(allows(&rules, "", "configmaps", verb), "configmaps {verb}");
    }
    assert!(allows(&rules, "", "pods", "get") && allows(&rules, "", "pods", "delete"));
    assert!(allows(&rules, "", "events", "create"));
    for (group, resource) in [("coordination.k8s.io", "leases"), ("", "configmaps")] {
        assert!(
            !allows(&rules, group, resource, "delete"),
            "the operator never deletes a lock"
        );
    }
    assert!(rules.iter().all(|r| !r.verbs.iter().any(|v| v == "*")));
}

#[test]
fn the_cluster_role_is_least_privilege() {
    let role: ClusterRole = docs("rbac/role.yaml", "ClusterRole").remove(0);
    let rules = role.rules.unwrap();
    for verb in ["get", "list", "watch", "update"] {
        assert!(
            allows(&rules, "cache.example.com", "memcacheds", verb),
            "memcacheds {verb}"
        );
    }
    assert!(allows(
        &rules,
        "cache.example.com",
        "memcacheds/status",
        "patch"
    ));
    assert!(allows(
        &rules,
        "cache.example.com",
        "memcacheds/finalizers",
        "update"
    ));
    for verb in ["get", "list", "watch", "create", "patch"] {
        assert!(
            allows(&rules, "apps", "deployments", verb),
            "deployments {verb}"
        );
    }
    assert!(allows(&rules, "", "pods", "list"));
    assert!(allows(&rules, "", "events", "create"));
    for r in &rules {
        assert!(
            !r.verbs
                .iter()
                .any(|v| v == "*" || v == "delete" || v == "deletecollection"),
            "{r:?}"
        );
        assert!(
            !r.resources
                .iter()
                .flatten()
                .any(|x| x == "*" || x == "secrets"),
            "{r:?}"
        );
    }
}

#[test]
fn the_sample_is_a_memcached_of_size_three() {
    let m: memcached_operator::crd::Memcached =
        docs("samples/cache_v1alpha1_memcached.yaml", "Memcached").remove(0);
    assert_eq!(m.spec.size, 3);
}
