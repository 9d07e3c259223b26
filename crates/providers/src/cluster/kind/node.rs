//! Faults carried out on kind's nodes (Docker containers) with `docker`: the commands and
//! how their answers are read.
//!
//! - A pod's containers: `docker exec <node> ctr --namespace k8s.io containers ls
//!   --quiet <labels of the pod>`, their main processes from `ctr tasks ls` (containerd's
//!   own client: kind's images also have crictl, nodes built by `ci/kind/build.sh` do not).
//! - Signals: [`SIGNAL_SCRIPT`] in the node sends a signal to every process in the pid
//!   namespace of each container (KILL for crash, STOP/CONT for hold/release), so the
//!   Pod stays and the kubelet restarts a killed container as after any crash.
//! - Pod partition: iptables rules in the pod's node against the pod's TCP traffic to
//!   the API server's port, in FORWARD (pods on other nodes than the API server) and
//!   INPUT (a pod on the control-plane node).
//! - Node hold: `docker pause`/`unpause`; node partition: `docker network
//!   disconnect`/`connect` of the kind network, back at the address it had.

use std::time::Duration;

use serde::Deserialize;

use super::KindError;
use super::command::Tools;
use crate::fault::Cut;

/// The port kube-apiserver listens on inside kind's control-plane node.
pub const API_SERVER_PORT: u16 = 6443;

/// Sends signal `$1` to every process in the pid namespace of each pid that follows
/// (the main process of a container). Run as `sh -c SIGNAL_SCRIPT sh SIG PID…`.
pub const SIGNAL_SCRIPT: &str = r#"sig=$1; shift; for main in "$@"; do ns=$(readlink /proc/$main/ns/pid) || exit 1; for p in /proc/[0-9]*; do if [ "$(readlink $p/ns/pid 2>/dev/null)" = "$ns" ]; then kill -s $sig ${p#/proc/} 2>/dev/null || true; fi; done; done"#;

/// The containerd namespace of the kubelet's containers.
pub const CONTAINERD_NAMESPACE: &str = "k8s.io";

/// The `ctr containers ls` filter of a pod's containers (not its sandbox), of one
/// container when `container` names it.
pub fn container_filter(pod_uid: &str, container: Option<&str>) -> String {
    let mut filter = format!(
        r#"labels."io.kubernetes.pod.uid"=={pod_uid},labels."io.cri-containerd.kind"==container"#
    );
    if let Some(name) = container {
        filter.push_str(&format!(
            r#",labels."io.kubernetes.container.name"=={name}"#
        ));
    }
    filter
}

/// The pids of the running tasks listed by `ctr tasks ls` (`ID PID STATUS`, after a
/// header) whose ids are in `ids`.
pub fn running_pids(tasks: &str, ids: &[&str]) -> Vec<u32> {
    tasks
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (id, pid, status) = (fields.next()?, fields.next()?, fields.next()?);
            let pid: u32 = pid.parse().ok()?;
            (status == "RUNNING" && pid > 0 && ids.contains(&id)).then_some(pid)
        })
        .collect()
}

/// The main processes (as `node` sees them) of a pod's running containers on `node`, of
/// one container when `container` names it. Asks the node's containerd with `ctr`, which
/// every kind node has (crictl is in kind's own images only).
///
/// # Errors
/// When a command fails.
pub async fn container_pids(
    tools: &Tools,
    limit: Duration,
    node: &str,
    pod_uid: &str,
    container: Option<&str>,
) -> Result<Vec<u32>, KindError> {
    let filter = container_filter(pod_uid, container);
    let listed = ctr(
        tools,
        limit,
        node,
        &["containers", "ls", "--quiet", &filter],
    )
    .await?;
    let ids: Vec<&str> = listed
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let tasks = ctr(tools, limit, node, &["tasks", "ls"]).await?;
    Ok(running_pids(&tasks, &ids))
}

/// Runs `ctr --namespace k8s.io <args>` in `node` (containerd's own client, in every kind
/// node) and returns what it printed.
///
/// # Errors
/// When the command fails.
pub async fn ctr(
    tools: &Tools,
    limit: Duration,
    node: &str,
    args: &[&str],
) -> Result<String, KindError> {
    let mut all = vec!["exec", node, "ctr", "--namespace", CONTAINERD_NAMESPACE];
    all.extend_from_slice(args);
    Ok(tools.run("docker", &all, limit).await?.stdout)
}

/// Sends `signal` (`KILL`, `STOP`, `CONT`) to every process of the containers whose main
/// processes are `pids`, inside `node`.
///
/// # Errors
/// When the command fails.
pub async fn signal(
    tools: &Tools,
    limit: Duration,
    node: &str,
    signal: &str,
    pids: &[u32],
) -> Result<(), KindError> {
    let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
    let mut args = vec!["exec", node, "sh", "-c", SIGNAL_SCRIPT, "sh", signal];
    args.extend(pids.iter().map(String::as_str));
    tools.run("docker", &args, limit).await?;
    Ok(())
}

/// One iptables rule of a pod partition: the program, the chain, and the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// `iptables` or `ip6tables`.
    pub program: &'static str,
    /// `FORWARD` or `INPUT`.
    pub chain: &'static str,
    /// The match and target.
    pub spec: Vec<String>,
}

/// The rules that cut the pod at `ip` from the API server: `Drop` resets its connections
/// (clients fail at once), `Hang` drops its packets (clients time out).
///
/// # Errors
/// `HangResponses`, which iptables cannot do soundly (it would also drop the handshake).
pub fn partition_rules(ip: &str, pod: &str, cut: Cut) -> Result<Vec<Rule>, String> {
    let target: &[&str] = match cut {
        Cut::Drop => &["REJECT", "--reject-with", "tcp-reset"],
        Cut::Hang => &["DROP"],
        Cut::HangResponses => {
            return Err("cut only the responses of a pod's API traffic (hang-responses)".into());
        }
    };
    let program = if ip.contains(':') {
        "ip6tables"
    } else {
        "iptables"
    };
    let port = API_SERVER_PORT.to_string();
    let comment = format!("opconform partition {pod}");
    Ok(["FORWARD", "INPUT"]
        .into_iter()
        .map(|chain| {
            let mut spec: Vec<String> = [
                "-s",
                ip,
                "-p",
                "tcp",
                "--dport",
                &port,
                "-m",
                "comment",
                "--comment",
                &comment,
                "-j",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            spec.extend(target.iter().map(|s| s.to_string()));
            Rule {
                program,
                chain,
                spec,
            }
        })
        .collect())
}

/// Inserts (`-I <chain> 1`) or deletes (`-D <chain>`) a rule in `node`.
///
/// # Errors
/// When the command fails.
pub async fn iptables(
    tools: &Tools,
    limit: Duration,
    node: &str,
    rule: &Rule,
    insert: bool,
) -> Result<(), KindError> {
    let mut args = vec!["exec", node, rule.program, "-w", "5"];
    if insert {
        args.extend(["-I", rule.chain, "1"]);
    } else {
        args.extend(["-D", rule.chain]);
    }
    args.extend(rule.spec.iter().map(String::as_str));
    tools.run("docker", &args, limit).await?;
    Ok(())
}

/// A node's addresses on the kind network.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Address {
    /// IPv4.
    #[serde(rename = "IPAddress", default)]
    pub ipv4: String,
    /// IPv6.
    #[serde(rename = "GlobalIPv6Address", default)]
    pub ipv6: String,
}

/// The addresses `node` has on `network`.
///
/// # Errors
/// When the command fails or the node is not on the network.
pub async fn address(
    tools: &Tools,
    limit: Duration,
    node: &str,
    network: &str,
) -> Result<Address, KindError> {
    let out = tools
        .run(
            "docker",
            &[
                "inspect",
                "--format",
                "{{json .NetworkSettings.Networks}}",
                node,
            ],
            limit,
        )
        .await?;
    let networks: std::collections::BTreeMap<String, Address> =
        serde_json::from_str(out.stdout.trim()).map_err(|_| KindError::Unexpected {
            what: "the node's networks",
            line: out.line.clone(),
            output: out.stdout.clone(),
        })?;
    networks.get(network).cloned().ok_or(KindError::Unexpected {
        what: "the node's address on the kind network",
        line: out.line,
        output: out.stdout,
    })
}

/// Connects `node` to `network` again, at `before` when Docker allows choosing the
/// address, else wherever Docker puts it — which must then be `before` too.
///
/// # Errors
/// When it cannot be connected, or comes back at another address.
pub async fn reconnect(
    tools: &Tools,
    limit: Duration,
    node: &str,
    network: &str,
    before: &Address,
) -> Result<(), KindError> {
    let mut args = vec!["network", "connect"];
    if !before.ipv4.is_empty() {
        args.extend(["--ip", before.ipv4.as_str()]);
    }
    if !before.ipv6.is_empty() {
        args.extend(["--ip6", before.ipv6.as_str()]);
    }
    args.extend([network, node]);
    let pinned = tools.output("docker", &args, &[], limit).await?;
    if pinned.success() {
        return Ok(());
    }
    // Docker refuses fixed addresses on networks whose subnet it chose itself; its
    // allocator hands out the lowest free address, normally the one just released.
    tools
        .run("docker", &["network", "connect", network, node], limit)
        .await?;
    let now = address(tools, limit, node, network).await?;
    if now != *before {
        return Err(KindError::AddressChanged {
            node: node.to_string(),
            before: format!("{} {}", before.ipv4, before.ipv6)
                .trim()
                .to_string(),
            now: format!("{} {}", now.ipv4, now.ipv6).trim().to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pods_running_containers_are_found_by_its_labels_and_their_tasks() {
        assert_eq!(
            container_filter("u-1", Some("manager")),
            r#"labels."io.kubernetes.pod.uid"==u-1,labels."io.cri-containerd.kind"==container,labels."io.kubernetes.container.name"==manager"#
        );
        let tasks = "TASK    PID    STATUS\nsandbox 10 RUNNING\nc1 42 RUNNING\nc2 0 STOPPED\nc3 43 RUNNING\n";
        assert_eq!(running_pids(tasks, &["c1", "c2"]), vec![42]);
    }

    #[test]
    fn a_dropping_partition_resets_the_pods_connections_to_the_api_server() {
        let rules = partition_rules("10.244.1.5", "ops/op-1", Cut::Drop).unwrap();
        assert_eq!(rules.len(), 2);
        assert_eq!((rules[0].program, rules[0].chain), ("iptables", "FORWARD"));
        assert_eq!(rules[1].chain, "INPUT");
        assert_eq!(
            rules[0].spec.join(" "),
            "-s 10.244.1.5 -p tcp --dport 6443 -m comment --comment opconform partition ops/op-1 -j REJECT --reject-with tcp-reset"
        );
        let hang = partition_rules("fd00::5", "ops/op-1", Cut::Hang).unwrap();
        assert_eq!(hang[0].program, "ip6tables");
        assert_eq!(hang[0].spec.last().unwrap(), "DROP");
        assert!(partition_rules("10.244.1.5", "ops/op-1", Cut::HangResponses).is_err());
    }
}
