//! The image of the operator under test on kind: where it comes from, and how one is built
//! for an operator that has none.
//!
//! The first of these that applies (see [`super::KindRun::provider`]):
//! 1. `OPCONFORM_IMAGE` names a prebuilt image ([`Origin::Prebuilt`]): scenarios deploy it
//!    in place of the image the manifests name; it is loaded when the local Docker engine
//!    has it, else the nodes pull it;
//! 2. the local Docker engine has an image of exactly the name the manifests give, which
//!    opconform did not build (it has no [`INPUT_LABEL`]): the user's own, loaded as it is
//!    ([`Origin::Local`]);
//! 3. `OPCONFORM_KIND_BASE_IMAGE` names a base image: an image of the operator's binary
//!    on it ([`BuildPlan`]), tagged with the manifests' own name so that nothing in them
//!    changes, and labelled with what it was built from ([`BuildPlan::input`]): an image of
//!    that name with the same label is reused ([`Origin::Cached`]), else it is built
//!    ([`Origin::Built`]) and the earlier build it replaces removed;
//! 4. the bundled operator (its manifests name [`crate::cluster::DEFAULT_OPERATOR_IMAGE`]):
//!    built from `operator/Dockerfile` ([`Origin::Dockerfile`]), labelled as built from it;
//!
//! and when none does, [`super::KindError::NoImage`] names the image and the ways to
//! provide it.
//!
//! Built images must run on the base: a binary static (the Go subjects are built with
//! `CGO_ENABLED=0`) or linked against a glibc no newer than the base's (Debian bookworm's
//! 2.36 for `ci/kind/build.sh base`).

use std::collections::BTreeMap;

/// The label of an image opconform built, whose value is what it was built from: an image
/// of the manifests' name without it is the user's own.
pub const INPUT_LABEL: &str = "io.opconform.build-input";

/// The user an image built from a binary runs as (as `operator/Dockerfile`'s, distroless's
/// `nonroot`).
pub const USER: &str = "65532:65532";

/// Where the binary goes when the manager container runs the image's entrypoint.
pub const BIN_DIR: &str = "/usr/local/bin";

/// The name of the binary in the build context.
pub const CONTEXT_BINARY: &str = "operator";

/// Bumped whenever [`BuildPlan::dockerfile`] changes, so earlier builds are not reused.
const FORMAT: u32 = 1;

/// Where the image scenarios deploy came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// `OPCONFORM_IMAGE`, in place of the manifests' image.
    Prebuilt,
    /// The local Docker engine's own image of the manifests' name.
    Local,
    /// Built from the same binary on the same base by an earlier run.
    Cached,
    /// Built now from the operator's binary on the base image.
    Built,
    /// Built now from `operator/Dockerfile` (the bundled operator).
    Dockerfile,
}

impl Origin {
    /// Where it came from, as a person says it.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Prebuilt => "prebuilt, OPCONFORM_IMAGE",
            Self::Local => "the local Docker engine's own",
            Self::Cached => "built by an earlier run from the same binary and base",
            Self::Built => "built from the operator's binary",
            Self::Dockerfile => "built from operator/Dockerfile",
        }
    }
}

/// An image of the operator's binary on a base image, under the manifests' own name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildPlan {
    /// The image's name: the one the manifests give.
    pub image: String,
    /// The base image.
    pub base: String,
    /// The binary.
    pub binary: std::path::PathBuf,
    /// Where the binary goes in the image (also its entrypoint).
    pub path: String,
}

impl BuildPlan {
    /// The plan for `binary` on `base` under the name `image`; `entrypoint` is the
    /// operator's [`crate::cluster::OperatorUnderTest::entrypoint_in_image`]: the path the
    /// manager container runs, or `None` for `/usr/local/bin/<the binary's file name>`.
    ///
    /// # Errors
    /// What is wrong with a path that is not absolute, names a directory or holds
    /// characters a Dockerfile cannot take as they are.
    pub fn new(
        image: &str,
        base: &str,
        binary: &std::path::Path,
        entrypoint: Option<String>,
    ) -> Result<Self, String> {
        let path = match entrypoint {
            Some(path) => path,
            None => {
                let name = binary
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| CONTEXT_BINARY.into());
                format!("{BIN_DIR}/{name}")
            }
        };
        if !path.starts_with('/') || path.ends_with('/') || path.split('/').any(|p| p == "..") {
            return Err(format!(
                "{path:?} is not the absolute path of a file in the image"
            ));
        }
        if path
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || "\"'\\$".contains(c))
        {
            return Err(format!(
                "{path:?} holds a space, quote, backslash or $, which a Dockerfile would not take as it is"
            ));
        }
        Ok(Self {
            image: image.to_string(),
            base: base.to_string(),
            binary: binary.to_path_buf(),
            path,
        })
    }

    /// The Dockerfile: the base, the binary (from [`CONTEXT_BINARY`] in the context) at
    /// its path as the entrypoint, user [`USER`].
    pub fn dockerfile(&self) -> String {
        let entrypoint = serde_json::to_string(&[&self.path]).expect("a string serializes");
        format!(
            "FROM {base}\nCOPY {CONTEXT_BINARY} {path}\nUSER {USER}\nENTRYPOINT {entrypoint}\n",
            base = self.base,
            path = self.path,
        )
    }

    /// What the image is built from, as its [`INPUT_LABEL`] says it: the binary's and the
    /// base's content (`binary_sha256`, the base's image id), the path, the format.
    pub fn input(&self, binary_sha256: &str, base_id: &str) -> String {
        format!(
            "binary=sha256:{binary_sha256} base={base_id} path={} format={FORMAT}",
            self.path
        )
    }
}

/// The `docker image inspect` format [`Found::parse`] reads.
pub const ID_AND_LABELS: &str = "{{.Id}} {{json .Config.Labels}}";

/// An image of the manifests' name that the local Docker engine has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Its id.
    pub id: String,
    /// Its [`INPUT_LABEL`]: what opconform built it from; `None` for the user's own.
    pub built_from: Option<String>,
}

impl Found {
    /// What `docker image inspect --format` [`ID_AND_LABELS`] printed (labels `null` for
    /// none), when it can be read.
    pub fn parse(text: &str) -> Option<Self> {
        let (id, json) = text.trim().split_once(' ')?;
        let labels: Option<BTreeMap<String, String>> = serde_json::from_str(json).ok()?;
        Some(Self {
            id: id.to_string(),
            built_from: labels.and_then(|mut l| l.remove(INPUT_LABEL)),
        })
    }
}

/// The hash `sha256sum FILE` printed (its first word), when it is one.
pub fn parse_sha256sum(output: &str) -> Option<&str> {
    output
        .split_whitespace()
        .next()
        .filter(|h| h.len() == 64 && h.chars().all(|c| c.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn a_binary_without_a_command_goes_to_usr_local_bin_as_the_entrypoint() {
        let plan = BuildPlan::new(
            "go-election-subject:dev",
            "opconform/debian:bookworm-1",
            Path::new("/t/debug/go/go-election"),
            None,
        )
        .unwrap();
        assert_eq!(plan.path, "/usr/local/bin/go-election");
        assert_eq!(
            plan.dockerfile(),
            "FROM opconform/debian:bookworm-1\nCOPY operator /usr/local/bin/go-election\nUSER 65532:65532\nENTRYPOINT [\"/usr/local/bin/go-election\"]\n"
        );
    }

    #[test]
    fn a_binary_goes_to_the_path_the_manager_container_runs() {
        let plan = BuildPlan::new(
            "opconform/kubebuilder-memcached:dev",
            "b:1",
            Path::new("/t/manager-bin"),
            Some("/manager".into()),
        )
        .unwrap();
        assert_eq!(plan.path, "/manager");
        assert!(plan.dockerfile().contains("COPY operator /manager\n"));
        assert!(plan.dockerfile().ends_with("ENTRYPOINT [\"/manager\"]\n"));
        assert_eq!(
            plan.input("ab12", "sha256:ff"),
            "binary=sha256:ab12 base=sha256:ff path=/manager format=1"
        );
    }

    #[test]
    fn a_relative_directory_or_unquotable_entrypoint_is_refused_with_the_path() {
        for bad in [
            "manager",
            "/bin/",
            "/a/../manager",
            "/my manager",
            "/$HOME/m",
        ] {
            let e = BuildPlan::new("i:1", "b:1", Path::new("/t/m"), Some(bad.into())).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{bad}: {e}");
        }
    }

    #[test]
    fn labels_and_hashes_are_read_from_what_docker_and_sha256sum_print() {
        let ours = Found::parse(r#"sha256:ab {"io.opconform.build-input":"binary=sha256:1"}"#);
        assert_eq!(
            ours,
            Some(Found {
                id: "sha256:ab".into(),
                built_from: Some("binary=sha256:1".into())
            })
        );
        let theirs = Found::parse("sha256:cd {\"org.opencontainers.image.title\":\"mine\"}\n");
        assert_eq!(theirs.unwrap().built_from, None);
        assert_eq!(Found::parse("sha256:ef null").unwrap().built_from, None);
        assert_eq!(Found::parse("sha256:ef"), None);
        let sum = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        assert_eq!(parse_sha256sum(&format!("{sum}  /t/op\n")), Some(sum));
        assert_eq!(parse_sha256sum("sha256sum: /t/op: No such file"), None);
    }
}
