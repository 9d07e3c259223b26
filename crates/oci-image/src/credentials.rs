//! Registry credentials ([`Credentials`]), and picking them for a registry from a docker
//! config — the `.dockerconfigjson` of a `kubernetes.io/dockerconfigjson` pull secret
//! (`{"auths": {"<registry>": {...}}}`), or the older `.dockercfg` (the `auths` map
//! itself) — as the kubelet does with a pod's `imagePullSecrets`.
//!
//! A key of `auths` names a registry as `host[:port]`, optionally with a scheme and a
//! path (`https://index.docker.io/v1/`, `registry.example.org:5000/team`), or a wildcard
//! host (`*.example.org`, one label per `*`). Hosts are compared without case; Docker Hub's
//! names (`docker.io`, `index.docker.io`, `registry-1.docker.io`) are one. When several
//! keys match, a key of the host alone wins over one with a path, which wins over a
//! wildcard; ties go to the first key in sorted order.
//!
//! An entry gives a username and password either as `username` and `password` or as
//! `auth`, the base64 of `username:password`; `auth` wins when both are there, as in the
//! kubelet.
//!
//! # Caveats
//! - Only the registry host is matched: a key's path (`host/team`) is not compared with
//!   the image's repository, so two path-scoped keys of one host are not told apart
//!   (the first in sorted order is taken).
//! - `identitytoken` and `registrytoken` (OAuth2 tokens) are not used: an entry with only
//!   those is refused with [`ImageError::DockerConfig`].
//! - One pull uses one set of credentials: unlike the kubelet, the next matching entry (of
//!   another pull secret) is not tried when the registry refuses the first.

use std::fmt;

use base64::Engine as _;

use crate::ImageError;

/// A username and password for a registry (HTTP basic auth, or for the registry's token
/// service). `Debug` does not show the password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The username.
    pub username: String,
    /// The password (or a personal access token used as one).
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl Credentials {
    /// Credentials of `username` and `password`.
    pub fn new(username: impl Into<String>, password: impl Into<String>) -> Self {
        Self {
            username: username.into(),
            password: password.into(),
        }
    }

    /// The credentials that the docker config `config` (the parsed `.dockerconfigjson` or
    /// `.dockercfg` of a pull secret) gives for `registry` — the registry part of an image
    /// reference, `host[:port]`, `docker.io` for Docker Hub (see
    /// [`registry_of`](crate::registry_of)); `None` when no entry is for it.
    pub fn from_docker_config(
        config: &serde_json::Value,
        registry: &str,
    ) -> Result<Option<Self>, ImageError> {
        let problem = |problem: String| ImageError::DockerConfig {
            registry: registry.to_owned(),
            problem,
        };
        let auths = config.get("auths").unwrap_or(config);
        let auths = auths.as_object().ok_or_else(|| {
            problem("expected a json object with an \"auths\" object of registries".to_owned())
        })?;
        let wanted = canonical_host(registry);
        let mut keys: Vec<(&String, u8)> = auths
            .keys()
            .filter_map(|key| key_rank(key, &wanted).map(|rank| (key, rank)))
            .collect();
        // Sorted by key already (a json object is a sorted map): the stable sort keeps
        // that order among keys of one rank.
        keys.sort_by_key(|&(_, rank)| std::cmp::Reverse(rank));
        let Some(&(key, _)) = keys.first() else {
            return Ok(None);
        };
        entry_credentials(&auths[key.as_str()])
            .map(Some)
            .map_err(|what| problem(format!("entry {key:?} {what}")))
    }
}

/// How well the `auths` key `key` names the registry `wanted` (canonical): 3 for the host
/// alone, 2 with a path, 1 for a wildcard; `None` when it does not.
fn key_rank(key: &str, wanted: &str) -> Option<u8> {
    let rest = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let (host, path) = match rest.split_once('/') {
        Some((host, path)) => (host, path.trim_matches('/')),
        None => (rest, ""),
    };
    let host = canonical_host(host);
    // Docker Hub's key is `https://index.docker.io/v1/`: its path is an API version.
    let is_api_version = host == "docker.io" && path == "v1";
    let has_path = !path.is_empty() && !is_api_version;
    if host == wanted {
        Some(if has_path { 2 } else { 3 })
    } else if wildcard_matches(&host, wanted) {
        Some(1)
    } else {
        None
    }
}

/// Whether the host pattern `pattern` (`*.example.org`, `*` one label each) matches `host`.
fn wildcard_matches(pattern: &str, host: &str) -> bool {
    if !pattern.contains('*') {
        return false;
    }
    let (pattern, pattern_port) = split_port(pattern);
    let (host, host_port) = split_port(host);
    if pattern_port != host_port {
        return false;
    }
    let labels: Vec<&str> = pattern.split('.').collect();
    let host_labels: Vec<&str> = host.split('.').collect();
    labels.len() == host_labels.len()
        && labels
            .iter()
            .zip(&host_labels)
            .all(|(p, h)| *p == "*" || p == h)
}

/// `host[:port]` split; an IPv6 address is in brackets (`[::1]:5000`).
pub(crate) fn split_port(host: &str) -> (&str, Option<&str>) {
    if host.starts_with('[') {
        return match host.split_once("]:") {
            Some((name, port)) => (&host[..=name.len()], Some(port)),
            None => (host, None),
        };
    }
    match host.rsplit_once(':') {
        Some((name, port)) => (name, Some(port)),
        None => (host, None),
    }
}

/// `host` in lowercase, Docker Hub's names as `docker.io`.
fn canonical_host(host: &str) -> String {
    let host = host.to_ascii_lowercase();
    match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => {
            "docker.io".to_owned()
        }
        _ => host,
    }
}

/// The credentials of one `auths` entry, or what is wrong with it.
fn entry_credentials(entry: &serde_json::Value) -> Result<Credentials, String> {
    let field = |name: &str| -> Result<Option<&str>, String> {
        match entry.get(name) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::String(s)) => Ok(Some(s.as_str()).filter(|s| !s.is_empty())),
            Some(_) => Err(format!("has a {name:?} that is not a string")),
        }
    };
    if !entry.is_object() {
        return Err("is not a json object".to_owned());
    }
    if let Some(auth) = field("auth")? {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .map_err(|e| format!("has an \"auth\" that is not base64 ({e})"))?;
        let decoded = String::from_utf8(decoded)
            .map_err(|_| "has an \"auth\" that is not utf-8 once decoded".to_owned())?;
        let (username, password) = decoded
            .split_once(':')
            .ok_or_else(|| "has an \"auth\" that is not base64 of username:password".to_owned())?;
        return Ok(Credentials::new(username, password));
    }
    match (field("username")?, field("password")?) {
        (Some(username), Some(password)) => Ok(Credentials::new(username, password)),
        _ => Err(
            "has neither \"auth\" nor \"username\" and \"password\" (identity and registry tokens are not supported)"
                .to_owned(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn auth(user_pass: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(user_pass)
    }

    #[test]
    fn the_entry_of_the_registry_host_is_picked_from_auths() {
        let config = json!({"auths": {
            "registry.example.org": {"username": "alice", "password": "a"},
            "127.0.0.1:5000": {"auth": auth("bob:b:c")},
        }});
        assert_eq!(
            Credentials::from_docker_config(&config, "127.0.0.1:5000").unwrap(),
            Some(Credentials::new("bob", "b:c"))
        );
        assert_eq!(
            Credentials::from_docker_config(&config, "Registry.Example.org").unwrap(),
            Some(Credentials::new("alice", "a"))
        );
        assert_eq!(
            Credentials::from_docker_config(&config, "127.0.0.1:5001").unwrap(),
            None
        );
    }

    #[test]
    fn docker_hub_keys_match_docker_io_whatever_their_form() {
        let config = json!({"auths": {
            "https://index.docker.io/v1/": {"auth": auth("hub:secret")},
        }});
        assert_eq!(
            Credentials::from_docker_config(&config, "docker.io").unwrap(),
            Some(Credentials::new("hub", "secret"))
        );
    }

    #[test]
    fn a_legacy_dockercfg_without_auths_is_read_as_the_auths_map() {
        let config = json!({"http://localhost:5000": {"username": "u", "password": "p"}});
        assert_eq!(
            Credentials::from_docker_config(&config, "localhost:5000").unwrap(),
            Some(Credentials::new("u", "p"))
        );
    }

    #[test]
    fn the_host_alone_wins_over_a_path_and_a_wildcard() {
        let config = json!({"auths": {
            "*.example.org": {"username": "wild", "password": "w"},
            "r.example.org/team": {"username": "team", "password": "t"},
            "r.example.org": {"username": "host", "password": "h"},
        }});
        let pick = |registry| Credentials::from_docker_config(&config, registry).unwrap();
        assert_eq!(pick("r.example.org").unwrap().username, "host");
        assert_eq!(pick("s.example.org").unwrap().username, "wild");
        assert_eq!(pick("a.b.example.org"), None);
    }

    #[test]
    fn an_unusable_entry_is_an_error_naming_the_registry_and_the_entry() {
        let config = json!({"auths": {"r.example.org": {"auth": "%%%"}}});
        let err = Credentials::from_docker_config(&config, "r.example.org").unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, ImageError::DockerConfig { .. }), "{message}");
        assert!(message.contains("r.example.org"), "{message}");
        assert!(message.contains("not base64"), "{message}");

        let config = json!({"auths": {"r.example.org": {"identitytoken": "x"}}});
        let err = Credentials::from_docker_config(&config, "r.example.org").unwrap_err();
        assert!(err.to_string().contains("neither"), "{err}");

        let err = Credentials::from_docker_config(&json!([1]), "r.example.org").unwrap_err();
        assert!(err.to_string().contains("auths"), "{err}");
    }

    #[test]
    fn the_password_is_not_shown_by_debug() {
        let shown = format!("{:?}", Credentials::new("u", "hunter2"));
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}
