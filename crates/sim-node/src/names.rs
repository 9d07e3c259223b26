//! A pod's names as the kubelet gives them: its host name (`spec.hostname`, else the pod's
//! name, cut to 63 characters), and the `/etc/hosts`, `/etc/resolv.conf` and
//! `/etc/hostname` its containers see.
//!
//! # Caveats
//! - There is no cluster DNS: a `ClusterFirst` pod gets the node's resolver configuration,
//!   as the kubelet does when it has no cluster DNS (it then also emits a
//!   `MissingClusterDNS` event, which this kubelet does not).
//! - `hostNetwork` pods get a hosts file of their own too (they have a pod IP of their own
//!   here; see the crate's caveats).

use std::fmt::Write as _;
use std::path::Path;

use k8s_openapi::api::core::v1::Pod;

/// The cluster's DNS domain, as the pods' FQDNs spell it.
pub const CLUSTER_DOMAIN: &str = "cluster.local";

/// The pod's host name: `spec.hostname`, else its name, at most 63 characters, without a
/// trailing `-` or `.` (the kubelet's `GeneratePodHostNameAndDomain`).
pub fn hostname(pod: &Pod) -> String {
    let name = pod
        .spec
        .as_ref()
        .and_then(|s| s.hostname.clone())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| pod.metadata.name.clone().unwrap_or_default());
    if name.len() <= 63 {
        return name;
    }
    name[..63].trim_end_matches(['-', '.']).to_string()
}

/// The pod's domain: `<subdomain>.<namespace>.svc.<cluster domain>`, when it has a
/// subdomain.
pub fn domain(pod: &Pod) -> Option<String> {
    let subdomain = pod
        .spec
        .as_ref()
        .and_then(|s| s.subdomain.clone())
        .filter(|s| !s.is_empty())?;
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    Some(format!("{subdomain}.{namespace}.svc.{CLUSTER_DOMAIN}"))
}

/// The hosts file the kubelet writes for a pod with address `ip`: the boilerplate, the
/// pod's own entry (with its FQDN when it has a subdomain), then its `hostAliases`.
pub fn hosts_file(pod: &Pod, ip: &str) -> String {
    let mut out = String::from(
        "# Kubernetes-managed hosts file.\n\
         127.0.0.1\tlocalhost\n\
         ::1\tlocalhost ip6-localhost ip6-loopback\n\
         fe00::0\tip6-localnet\n\
         fe00::0\tip6-mcastprefix\n\
         fe00::1\tip6-allnodes\n\
         fe00::2\tip6-allrouters\n",
    );
    let host = hostname(pod);
    match domain(pod) {
        Some(d) => {
            let _ = writeln!(out, "{ip}\t{host}.{d}\t{host}");
        }
        None => {
            let _ = writeln!(out, "{ip}\t{host}");
        }
    }
    let aliases = pod
        .spec
        .as_ref()
        .and_then(|s| s.host_aliases.clone())
        .unwrap_or_default();
    if !aliases.is_empty() {
        out.push_str("\n# Entries added by HostAliases.\n");
        for alias in aliases {
            let names = alias.hostnames.unwrap_or_default().join("\t");
            let _ = writeln!(out, "{}\t{names}", alias.ip);
        }
    }
    out
}

/// A resolver configuration: name servers, search domains and options.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolver {
    /// `nameserver` lines.
    pub nameservers: Vec<String>,
    /// The `search` line.
    pub searches: Vec<String>,
    /// The `options` line.
    pub options: Vec<String>,
}

impl Resolver {
    /// Reads a `resolv.conf` (comments, `domain` and unknown lines ignored).
    pub fn parse(text: &str) -> Self {
        let mut r = Self::default();
        for line in text.lines() {
            let line = line.split(['#', ';']).next().unwrap_or("").trim();
            let mut words = line.split_whitespace();
            match words.next() {
                Some("nameserver") => r.nameservers.extend(words.map(str::to_string)),
                Some("search") => r.searches = words.map(str::to_string).collect(),
                Some("options") => r.options.extend(words.map(str::to_string)),
                _ => {}
            }
        }
        r
    }

    /// The node's own, from `/etc/resolv.conf` (empty when unreadable).
    pub fn of_node() -> Self {
        std::fs::read_to_string(Path::new("/etc/resolv.conf"))
            .map(|t| Self::parse(&t))
            .unwrap_or_default()
    }

    /// The file, in the kubelet's order: search, name servers, options.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if !self.searches.is_empty() {
            let _ = writeln!(out, "search {}", self.searches.join(" "));
        }
        for ns in &self.nameservers {
            let _ = writeln!(out, "nameserver {ns}");
        }
        if !self.options.is_empty() {
            let _ = writeln!(out, "options {}", self.options.join(" "));
        }
        out
    }
}

/// The resolver configuration of `pod` on a node whose own is `node`, with no cluster DNS:
/// `None` policy starts empty, every other policy from the node's; then the pod's
/// `dnsConfig` is merged in (name servers and searches appended without duplicates, options
/// replaced by name).
pub fn resolver(pod: &Pod, node: &Resolver) -> Resolver {
    let spec = pod.spec.as_ref();
    let policy = spec
        .and_then(|s| s.dns_policy.as_deref())
        .unwrap_or("ClusterFirst");
    let mut r = if policy == "None" {
        Resolver::default()
    } else {
        node.clone()
    };
    if let Some(config) = spec.and_then(|s| s.dns_config.as_ref()) {
        for ns in config.nameservers.iter().flatten() {
            if !r.nameservers.contains(ns) {
                r.nameservers.push(ns.clone());
            }
        }
        for s in config.searches.iter().flatten() {
            if !r.searches.contains(s) {
                r.searches.push(s.clone());
            }
        }
        for o in config.options.iter().flatten() {
            let name = o.name.clone().unwrap_or_default();
            r.options
                .retain(|existing| existing.split(':').next() != Some(name.as_str()));
            r.options.push(match &o.value {
                Some(v) => format!("{name}:{v}"),
                None => name,
            });
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web-0", "namespace": "shop"},
            "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn the_host_name_is_the_pods_name_unless_spec_hostname_says_otherwise() {
        assert_eq!(hostname(&pod(json!({"containers": []}))), "web-0");
        assert_eq!(
            hostname(&pod(json!({"containers": [], "hostname": "db"}))),
            "db"
        );
        let long = format!("{}-{}", "a".repeat(62), "b");
        let p: Pod = serde_json::from_value(json!({"metadata": {"name": long}})).unwrap();
        assert_eq!(hostname(&p), "a".repeat(62));
    }

    #[test]
    fn the_hosts_file_names_the_pod_with_its_fqdn_and_its_aliases() {
        let p = pod(json!({"containers": [], "subdomain": "web",
            "hostAliases": [{"ip": "10.1.2.3", "hostnames": ["foo.remote", "bar.remote"]}]}));
        let hosts = hosts_file(&p, "127.101.0.5");
        assert!(hosts.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"));
        assert!(
            hosts.contains("127.101.0.5\tweb-0.web.shop.svc.cluster.local\tweb-0\n"),
            "{hosts}"
        );
        assert!(
            hosts
                .ends_with("\n# Entries added by HostAliases.\n10.1.2.3\tfoo.remote\tbar.remote\n"),
            "{hosts}"
        );
        let plain = hosts_file(&pod(json!({"containers": []})), "127.101.0.6");
        assert!(
            plain.ends_with("fe00::2\tip6-allrouters\n127.101.0.6\tweb-0\n"),
            "{plain}"
        );
    }

    #[test]
    fn dns_config_merges_into_the_nodes_resolver_and_policy_none_starts_empty() {
        let node =
            Resolver::parse("# comment\nnameserver 10.0.0.1\nsearch corp\noptions ndots:1 edns0\n");
        let p = pod(json!({"containers": [], "dnsConfig": {
            "nameservers": ["1.1.1.1"], "searches": ["x.y"],
            "options": [{"name": "ndots", "value": "5"}, {"name": "rotate"}]}}));
        assert_eq!(
            resolver(&p, &node).render(),
            "search corp x.y\nnameserver 10.0.0.1\nnameserver 1.1.1.1\noptions edns0 ndots:5 rotate\n"
        );
        let none = pod(json!({"containers": [], "dnsPolicy": "None",
            "dnsConfig": {"nameservers": ["1.1.1.1"]}}));
        assert_eq!(resolver(&none, &node).render(), "nameserver 1.1.1.1\n");
    }
}
