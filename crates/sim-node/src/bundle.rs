//! What one container of a pod runs with when pods are containers: the pieces of its
//! [`ContainerSpec`] that come from the pod — the user and capabilities of its
//! `securityContext` (`runAsNonRoot` enforced as the kubelet enforces it), its limits, and
//! its mounts: the pod's `/etc/hosts`, `/etc/resolv.conf` and `/etc/hostname`, its volumes,
//! and the clock file and library of clock skew.
//!
//! [`ContainerSpec`]: super::oci::ContainerSpec

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod};

use super::env::parse_quantity;
use super::oci::{BindMount, Limits, Security};

/// Where a container finds the pod's clock file (libfaketime's `FAKETIME_TIMESTAMP_FILE`).
pub const CLOCK_DIR: &str = "/var/run/opconform/clock";

/// The pod's clock directory, in the pod's directory on the host.
pub const CLOCK_HOST_DIR: &str = ".clock";

/// The clock file's name in the pod's clock directory.
pub const CLOCK_FILE: &str = "faketime";

/// Errors of a container's security context.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    /// `runAsNonRoot` with a process that would run as root.
    #[error(
        "container has runAsNonRoot and image will run as root (pod: \"{pod}\", container: {container})"
    )]
    RunsAsRoot {
        /// `<name>_<namespace>(<uid>)`.
        pod: String,
        /// The container.
        container: String,
    },
    /// `runAsNonRoot` with an image user given by name.
    #[error(
        "container has runAsNonRoot and image has non-numeric user ({user}), cannot verify user is non-root (pod: \"{pod}\", container: {container})"
    )]
    NonNumericUser {
        /// The image's user.
        user: String,
        /// `<name>_<namespace>(<uid>)`.
        pod: String,
        /// The container.
        container: String,
    },
}

/// The security of `container` in `pod` whose image runs as `image_user` (`uid[:gid]`,
/// names looked up in `rootfs`'s `/etc/passwd` and `/etc/group` when given): the
/// container's `securityContext` over the pod's, as the kubelet merges them.
///
/// # Errors
/// `runAsNonRoot` refused, with the kubelet's message.
pub fn security(
    pod: &Pod,
    container: &Container,
    image_user: Option<&str>,
    rootfs: Option<&Path>,
) -> Result<Security, BundleError> {
    let pod_sc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let sc = container.security_context.as_ref();
    let pod_name = || {
        format!(
            "{}_{}({})",
            pod.metadata.name.as_deref().unwrap_or_default(),
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.uid.as_deref().unwrap_or_default()
        )
    };
    let (mut uid, mut gid, mut named) = (0u32, None, None);
    if let Some(user) = image_user.filter(|u| !u.is_empty()) {
        let (u, g) = user.split_once(':').unwrap_or((user, ""));
        match u.parse::<u32>() {
            Ok(n) => uid = n,
            Err(_) => match rootfs.and_then(|r| lookup(r, "etc/passwd", u)) {
                Some((n, primary)) => {
                    uid = n;
                    gid = primary;
                }
                None => named = Some(u.to_string()),
            },
        }
        if !g.is_empty() {
            gid = g
                .parse::<u32>()
                .ok()
                .or_else(|| rootfs.and_then(|r| lookup(r, "etc/group", g)).map(|x| x.0));
        }
    }
    let run_as_user = sc
        .and_then(|s| s.run_as_user)
        .or(pod_sc.and_then(|s| s.run_as_user));
    if let Some(u) = run_as_user {
        uid = u as u32;
        named = None;
    }
    let run_as_group = sc
        .and_then(|s| s.run_as_group)
        .or(pod_sc.and_then(|s| s.run_as_group));
    let gid = run_as_group.map(|g| g as u32).or(gid).unwrap_or(0);
    let non_root = sc
        .and_then(|s| s.run_as_non_root)
        .or(pod_sc.and_then(|s| s.run_as_non_root))
        == Some(true);
    if non_root {
        if let Some(user) = named {
            return Err(BundleError::NonNumericUser {
                user,
                pod: pod_name(),
                container: container.name.clone(),
            });
        }
        if uid == 0 {
            return Err(BundleError::RunsAsRoot {
                pod: pod_name(),
                container: container.name.clone(),
            });
        }
    }
    let mut additional_gids: Vec<u32> = Vec::new();
    if let Some(p) = pod_sc {
        additional_gids.extend(p.fs_group.map(|g| g as u32));
        additional_gids.extend(p.supplemental_groups.iter().flatten().map(|g| *g as u32));
    }
    additional_gids.sort_unstable();
    additional_gids.dedup();
    let caps = sc.and_then(|s| s.capabilities.as_ref());
    Ok(Security {
        uid,
        gid,
        additional_gids,
        privileged: sc.and_then(|s| s.privileged) == Some(true),
        add: caps.and_then(|c| c.add.clone()).unwrap_or_default(),
        drop: caps.and_then(|c| c.drop.clone()).unwrap_or_default(),
        read_only_root: sc.and_then(|s| s.read_only_root_filesystem) == Some(true),
        no_new_privileges: sc.and_then(|s| s.allow_privilege_escalation) == Some(false),
    })
}

/// The id (and primary group, for users) of `name` in `file` (`etc/passwd` or
/// `etc/group`) of `rootfs`.
fn lookup(rootfs: &Path, file: &str, name: &str) -> Option<(u32, Option<u32>)> {
    let text = std::fs::read_to_string(rootfs.join(file)).ok()?;
    text.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.first() == Some(&name) && fields.len() > 2).then(|| {
            let id = fields[2].parse().ok()?;
            let primary = fields.get(3).and_then(|g| g.parse().ok());
            Some((id, primary))
        })?
    })
}

/// The container's limits: `limits.memory`, `limits.cpu` and `requests.cpu`.
pub fn limits(container: &Container) -> Limits {
    let resources = container.resources.as_ref();
    let quantity = |list: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
                    key: &str| {
        list.and_then(|l| l.get(key))
            .and_then(|q| parse_quantity(&q.0))
    };
    let limits = resources.and_then(|r| r.limits.as_ref());
    let requests = resources.and_then(|r| r.requests.as_ref());
    Limits {
        memory_bytes: quantity(limits, "memory").map(|b| b.round() as i64),
        cpu_millis: quantity(limits, "cpu").map(|c| (c * 1000.0).ceil() as i64),
        cpu_request_millis: quantity(requests, "cpu").map(|c| (c * 1000.0).ceil() as i64),
    }
}

/// The pod's files of names in `dir` (`hosts`, `resolv.conf`, `hostname`), bound where a
/// container reads them.
pub fn name_mounts(dir: &Path) -> Vec<BindMount> {
    ["hosts", "resolv.conf", "hostname"]
        .into_iter()
        .map(|f| BindMount {
            source: dir.join(f),
            destination: format!("/etc/{f}"),
            read_only: false,
        })
        .collect()
}

/// The clock of clock skew: the pod's clock directory at [`CLOCK_DIR`], and libfaketime at
/// its host path.
pub fn clock_mounts(clock_dir: &Path, library: &Path) -> Vec<BindMount> {
    vec![
        BindMount {
            source: clock_dir.to_path_buf(),
            destination: CLOCK_DIR.into(),
            read_only: true,
        },
        BindMount {
            source: library.to_path_buf(),
            destination: library.display().to_string(),
            read_only: true,
        },
    ]
}

/// Where a mapped executable is bound in its container, and the `argv[0]` it runs as:
/// at `command[0]` when that is an absolute path outside the host directories the
/// container sees, else under `/opconform/bin`.
pub fn executable_place(command0: Option<&str>, program: &Path) -> String {
    const HOST: &[&str] = &[
        "usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "proc", "sys", "dev",
    ];
    if let Some(c) = command0
        && let Some(rest) = c.strip_prefix('/')
        && !rest.is_empty()
        && !rest.ends_with('/')
        && !rest
            .split('/')
            .any(|part| part == ".." || part == "." || part.is_empty())
        && !HOST.contains(&rest.split('/').next().unwrap_or_default())
    {
        return c.to_string();
    }
    let name = command0
        .and_then(|c| Path::new(c).file_name())
        .or_else(|| program.file_name())
        .map_or_else(|| "entrypoint".into(), |n| n.to_string_lossy().into_owned());
    PathBuf::from("/opconform/bin")
        .join(name)
        .display()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod_and_container(pod_sc: serde_json::Value, sc: serde_json::Value) -> (Pod, Container) {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "n", "uid": "u1"},
            "spec": {"securityContext": pod_sc, "containers": [{"name": "c", "securityContext": sc}]},
        }))
        .unwrap();
        let c = pod.spec.as_ref().unwrap().containers[0].clone();
        (pod, c)
    }

    #[test]
    fn the_containers_security_context_wins_over_the_pods_and_the_images_user() {
        let (pod, c) = pod_and_container(
            json!({"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000, "supplementalGroups": [4000]}),
            json!({"runAsUser": 1001, "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false,
                   "capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]}}),
        );
        let s = security(&pod, &c, Some("65532:65532"), None).unwrap();
        assert_eq!((s.uid, s.gid), (1001, 3000));
        assert_eq!(s.additional_gids, [2000, 4000]);
        assert!(s.read_only_root && s.no_new_privileges);
        assert_eq!(s.add, ["NET_ADMIN"]);
        assert_eq!(s.drop, ["ALL"]);
        let (pod, c) = pod_and_container(json!({}), json!({}));
        let s = security(&pod, &c, Some("65532:65533"), None).unwrap();
        assert_eq!((s.uid, s.gid), (65532, 65533));
    }

    #[test]
    fn run_as_non_root_refuses_root_and_names_it_as_the_kubelet_does() {
        let (pod, c) = pod_and_container(json!({"runAsNonRoot": true}), json!({}));
        let e = security(&pod, &c, None, None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "container has runAsNonRoot and image will run as root (pod: \"p_n(u1)\", container: c)"
        );
        let e = security(&pod, &c, Some("nobody"), None).unwrap_err();
        assert!(matches!(e, BundleError::NonNumericUser { .. }), "{e}");
        assert!(security(&pod, &c, Some("65532"), None).is_ok());
    }

    #[test]
    fn an_image_user_given_by_name_is_looked_up_in_the_images_passwd() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("etc")).unwrap();
        std::fs::write(
            root.path().join("etc/passwd"),
            "root:x:0:0::/root:/bin/sh\nnonroot:x:65532:65532::/home/nonroot:/sbin/nologin\n",
        )
        .unwrap();
        let (pod, c) = pod_and_container(json!({"runAsNonRoot": true}), json!({}));
        let s = security(&pod, &c, Some("nonroot"), Some(root.path())).unwrap();
        assert_eq!((s.uid, s.gid), (65532, 65532));
    }

    #[test]
    fn limits_are_read_as_bytes_and_millicores() {
        let c: Container = serde_json::from_value(json!({"name": "c", "resources": {
            "limits": {"memory": "64Mi", "cpu": "500m"}, "requests": {"cpu": "0.1"}}}))
        .unwrap();
        assert_eq!(
            limits(&c),
            Limits {
                memory_bytes: Some(64 * 1024 * 1024),
                cpu_millis: Some(500),
                cpu_request_millis: Some(100),
            }
        );
    }

    #[test]
    fn a_mapped_executable_sits_at_command0_unless_that_is_a_host_directory() {
        let exe = Path::new("/build/target/memcached-operator");
        assert_eq!(executable_place(Some("/manager"), exe), "/manager");
        assert_eq!(
            executable_place(Some("/usr/bin/op"), exe),
            "/opconform/bin/op"
        );
        assert_eq!(
            executable_place(Some("memcached-operator"), exe),
            "/opconform/bin/memcached-operator"
        );
        assert_eq!(
            executable_place(None, exe),
            "/opconform/bin/memcached-operator"
        );
        assert_eq!(
            executable_place(Some("/a/../etc"), exe),
            "/opconform/bin/etc"
        );
    }
}
