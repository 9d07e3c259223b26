//! This machine's platform in the image spec's terms (`linux/<GOARCH>`), and whether an
//! image or the entry of a multi-platform index is for it.
//!
//! # Caveats
//! Only the OS and the architecture are compared: CPU variants (`arm/v7`, `arm64/v8`) and
//! `os.version`/`os.features` are shown in messages but not used to choose; the first
//! entry of the right OS and architecture wins.

use oci_spec::image::{Descriptor, Platform};

/// This machine's architecture as Go names it (`GOARCH`), as image platforms do.
pub(crate) fn this_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "x86" => "386",
        "aarch64" => "arm64",
        "loongarch64" => "loong64",
        "powerpc" => "ppc",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        "powerpc64" => "ppc64",
        "mips64" if cfg!(target_endian = "little") => "mips64le",
        "mips" if cfg!(target_endian = "little") => "mipsle",
        other => other,
    }
}

/// This machine's platform, `linux/<GOARCH>`.
pub(crate) fn wanted() -> String {
    format!("linux/{}", this_arch())
}

/// Whether `os` and `arch` (as an image names them) are this machine's.
pub(crate) fn is_this(os: &str, arch: &str) -> bool {
    os == "linux" && arch == this_arch()
}

/// Whether the platform of an index entry is this machine's.
pub(crate) fn is_this_platform(platform: &Platform) -> bool {
    is_this(
        &platform.os().to_string(),
        &platform.architecture().to_string(),
    )
}

/// The first of `entries` (of an image index) whose platform is this machine's; when
/// none is, the platforms found, as [`describe`] names them.
pub(crate) fn pick<'a>(entries: &[&'a Descriptor]) -> Result<&'a Descriptor, Vec<String>> {
    entries
        .iter()
        .copied()
        .find(|d| d.platform().as_ref().is_some_and(is_this_platform))
        .ok_or_else(|| {
            entries
                .iter()
                .map(|d| describe(d.platform().as_ref()))
                .collect()
        })
}

/// `os/arch[/variant]`, or `unknown` when an entry names no platform.
pub(crate) fn describe(platform: Option<&Platform>) -> String {
    match platform {
        Some(p) => {
            let mut out = format!("{}/{}", p.os(), p.architecture());
            if let Some(variant) = p.variant() {
                out.push('/');
                out.push_str(variant);
            }
            out
        }
        None => "unknown".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_is_named_as_go_names_it() {
        #[cfg(target_arch = "x86_64")]
        assert_eq!(this_arch(), "amd64");
        #[cfg(target_arch = "aarch64")]
        assert_eq!(this_arch(), "arm64");
        assert!(wanted().starts_with("linux/"));
        assert!(is_this("linux", this_arch()));
        assert!(!is_this("windows", this_arch()));
    }
}
