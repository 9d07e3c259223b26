//! Matching an image reference (`example.org/op:dev`, `busybox`) against the names a
//! source gives its images: the `org.opencontainers.image.ref.name` annotation (a full
//! reference, or only a tag as the image-layout spec allows), the
//! `io.containerd.image.name` annotation that docker 25+ writes, and `RepoTags` of a
//! `docker save` `manifest.json`.
//!
//! Two references match when they are equal, or equal once normalised as docker
//! normalises them: a name without a registry is on `docker.io`, a one-part `docker.io`
//! name is under `library/`, and a reference with neither tag nor digest is `:latest`
//! (so `busybox`, `busybox:latest` and `docker.io/library/busybox:latest` are one). A name
//! that is only a tag (`dev`) matches a reference with that tag, but more weakly: only
//! when the image has no full name, and only when no full name matches.
//!
//! # Caveats
//! References are compared as strings after normalisation: they are not validated, and a
//! digest reference (`name@sha256:…`) matches only a name carrying the same digest.

/// How well a reference matches a name: none, by tag only, or fully.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Score {
    None,
    Tag,
    Full,
}

/// How well the reference `query` matches the image name `name`.
pub(crate) fn score(query: &str, name: &str) -> Score {
    if query == name || normalise(query).is_some_and(|q| normalise(name) == Some(q)) {
        Score::Full
    } else {
        Score::None
    }
}

/// Whether `name` is only a tag (no repository): `dev`, `1.0`, `latest`.
pub(crate) fn is_bare_tag(name: &str) -> bool {
    !name.is_empty() && !name.contains(['/', ':', '@'])
}

/// Whether the reference `query` has the tag `tag` (`latest` when it names none).
pub(crate) fn has_tag(query: &str, tag: &str) -> bool {
    let (rest, digest) = split_digest(query);
    let (_, query_tag) = split_tag(rest);
    match query_tag {
        Some(query_tag) => query_tag == tag,
        None => digest.is_none() && tag == "latest",
    }
}

/// `query` in the form `registry/path[:tag][@digest]`, docker's defaults filled in.
pub(crate) fn normalise(query: &str) -> Option<String> {
    let (rest, digest) = split_digest(query);
    let (name, tag) = split_tag(rest);
    if name.is_empty() {
        return None;
    }
    let (domain, path) = match name.split_once('/') {
        Some((domain, path))
            if domain.contains('.') || domain.contains(':') || domain == "localhost" =>
        {
            (domain, path.to_owned())
        }
        _ => ("docker.io", name.to_owned()),
    };
    let domain = if domain == "index.docker.io" {
        "docker.io"
    } else {
        domain
    };
    let path = if domain == "docker.io" && !path.contains('/') {
        format!("library/{path}")
    } else {
        path
    };
    let mut out = format!("{domain}/{path}");
    match (tag, digest) {
        (Some(tag), _) => {
            out.push(':');
            out.push_str(tag);
        }
        (None, None) => out.push_str(":latest"),
        (None, Some(_)) => {}
    }
    if let Some(digest) = digest {
        out.push('@');
        out.push_str(digest);
    }
    Some(out)
}

fn split_digest(reference: &str) -> (&str, Option<&str>) {
    match reference.split_once('@') {
        Some((rest, digest)) => (rest, Some(digest)),
        None => (reference, None),
    }
}

/// Splits `name:tag`; the tag is after the last `:` that follows the last `/` (a `:`
/// before a `/` is a registry's port).
fn split_tag(reference: &str) -> (&str, Option<&str>) {
    let last_part = reference.rfind('/').map_or(0, |i| i + 1);
    match reference[last_part..].rfind(':') {
        Some(i) => (
            &reference[..last_part + i],
            Some(&reference[last_part + i + 1..]),
        ),
        None => (reference, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_hub_short_names_match_their_long_form() {
        assert_eq!(
            score("busybox", "docker.io/library/busybox:latest"),
            Score::Full
        );
        assert_eq!(score("busybox:latest", "busybox"), Score::Full);
        assert_eq!(score("library/busybox", "busybox:latest"), Score::Full);
        assert_eq!(
            score("index.docker.io/library/busybox", "busybox"),
            Score::Full
        );
        assert_eq!(score("busybox:1.36", "busybox:latest"), Score::None);
        assert_eq!(score("alpine", "busybox"), Score::None);
    }

    #[test]
    fn a_registry_with_a_port_is_not_taken_for_a_tag() {
        assert_eq!(
            normalise("localhost:5000/op").as_deref(),
            Some("localhost:5000/op:latest")
        );
        assert_eq!(
            normalise("example.org:443/team/op:dev").as_deref(),
            Some("example.org:443/team/op:dev")
        );
        assert_eq!(
            score("example.org/op:dev", "example.org/op:dev"),
            Score::Full
        );
        assert_eq!(score("example.org/op", "docker.io/op"), Score::None);
    }

    #[test]
    fn a_bare_tag_is_compared_with_the_tag_of_the_reference() {
        assert!(is_bare_tag("dev"));
        assert!(!is_bare_tag("example.org/op:dev"));
        assert!(has_tag("example.org/op:dev", "dev"));
        assert!(has_tag("busybox", "latest"));
        assert!(!has_tag("busybox:1.36", "latest"));
        assert!(!has_tag("localhost:5000/op", "5000/op"));
    }
}
