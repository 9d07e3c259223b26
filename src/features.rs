//! The features `opconform test` runs: the shipped ones, carried inside the binary so that
//! it runs from any directory with no checkout of this repository, and the user's own
//! feature files or directories of them.
//!
//! Nothing is copied: the user's files are read where they are (a failed step names the
//! user's own file and line), the shipped ones from the executable.

use std::path::Path;

pub use opconform_steps::features::{FeatureSet, run_name, run_of};

/// A feature shipped with opconform: its short name, its file name and its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shipped {
    /// The name `opconform test` takes (`lease`, `for-life`, …).
    pub name: &'static str,
    /// Its path in the repository (`features/…`), which reports name it by.
    pub path: &'static str,
    /// Its Gherkin text.
    pub text: &'static str,
}

impl Shipped {
    /// Its file name.
    pub fn file(&self) -> &'static str {
        self.path.rsplit('/').next().unwrap_or(self.path)
    }
}

/// Every shipped feature, in the order `opconform test` runs them by default.
pub const SHIPPED: &[Shipped] = &[
    Shipped {
        name: "lease",
        path: "features/leader_with_lease.feature",
        text: include_str!("../features/leader_with_lease.feature"),
    },
    Shipped {
        name: "for-life",
        path: "features/leader_for_life.feature",
        text: include_str!("../features/leader_for_life.feature"),
    },
    Shipped {
        name: "reconcile",
        path: "features/reconcile_results.feature",
        text: include_str!("../features/reconcile_results.feature"),
    },
    Shipped {
        name: "finalizers",
        path: "features/finalizers.feature",
        text: include_str!("../features/finalizers.feature"),
    },
    Shipped {
        name: "any-kind",
        path: "features/any_kind.feature",
        text: include_str!("../features/any_kind.feature"),
    },
    Shipped {
        name: "detection",
        path: "features/detection.feature",
        text: include_str!("../features/detection.feature"),
    },
    Shipped {
        name: "simulated-control-plane",
        path: "features/simulated_control_plane.feature",
        text: include_str!("../features/simulated_control_plane.feature"),
    },
];

/// Errors of naming features.
#[derive(Debug, thiserror::Error)]
pub enum FeaturesError {
    /// An argument is neither a path nor a shipped feature's name.
    #[error(
        "{argument:?} is neither a feature file, a directory, nor a shipped feature: expected a \
         path or one of {names}"
    )]
    Unknown {
        /// The argument.
        argument: String,
        /// The shipped names, comma-separated.
        names: String,
    },
    /// A path named cannot be run.
    #[error(transparent)]
    Path(#[from] opconform_steps::features::FeaturesError),
}

/// The features `arguments` name: shipped features by name (or file name), feature files
/// and directories (every `.feature` below them); every shipped feature when `arguments`
/// is empty. A path that exists wins over a shipped name.
///
/// # Errors
/// An argument that names nothing, a file that is not a `.feature`, or a directory with
/// none.
pub fn gather(arguments: &[String]) -> Result<FeatureSet, FeaturesError> {
    if arguments.is_empty() {
        return Ok(SHIPPED
            .iter()
            .fold(FeatureSet::new(), |set, s| set.embedded(s.path, s.text)));
    }
    let mut set = FeatureSet::new();
    for argument in arguments {
        if Path::new(argument).exists() {
            set = set.path(argument)?;
            continue;
        }
        let shipped = SHIPPED
            .iter()
            .find(|s| s.name == argument || s.file() == argument)
            .ok_or_else(|| FeaturesError::Unknown {
                argument: argument.clone(),
                names: SHIPPED
                    .iter()
                    .map(|s| s.name)
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        set = set.embedded(shipped.path, shipped.text);
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;
    use opconform_steps::features::Feature;

    #[test]
    fn every_feature_of_the_repository_is_shipped_as_written_and_nothing_else() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let on_disk = FeatureSet::new().path(root.join("features")).unwrap();
        let on_disk: Vec<String> = on_disk
            .features()
            .iter()
            .map(|f| match f {
                Feature::File(p) => p.strip_prefix(root).unwrap().display().to_string(),
                Feature::Embedded { path, .. } => path.to_string(),
            })
            .collect();
        let mut shipped: Vec<String> = SHIPPED.iter().map(|s| s.path.to_string()).collect();
        shipped.sort();
        assert_eq!(on_disk, shipped, "features/ and SHIPPED differ");
        for s in SHIPPED {
            assert_eq!(
                std::fs::read_to_string(root.join(s.path)).unwrap(),
                s.text,
                "{} is embedded as written",
                s.path
            );
        }
    }

    #[test]
    fn no_argument_is_every_shipped_feature() {
        let set = gather(&[]).unwrap();
        assert_eq!(set.len(), SHIPPED.len());
        assert!(matches!(
            set.features()[0],
            Feature::Embedded {
                path: "features/leader_with_lease.feature",
                ..
            }
        ));
    }

    #[test]
    fn shipped_names_file_names_and_paths_mix_in_the_order_given() {
        let user = tempfile::tempdir().unwrap();
        let mine = user.path().join("mine.feature");
        std::fs::write(&mine, "Feature: mine\n").unwrap();
        let set = gather(&[
            "lease".into(),
            "finalizers.feature".into(),
            mine.display().to_string(),
        ])
        .unwrap();
        assert_eq!(
            set.features(),
            &[
                Feature::Embedded {
                    path: SHIPPED[0].path,
                    text: SHIPPED[0].text
                },
                Feature::Embedded {
                    path: SHIPPED[3].path,
                    text: SHIPPED[3].text
                },
                Feature::File(mine),
            ]
        );
    }

    #[test]
    fn an_unknown_name_is_refused_with_the_shipped_names() {
        let e = gather(&["leases".into()]).unwrap_err().to_string();
        assert!(
            e.contains("\"leases\" is neither a feature file")
                && e.contains("lease, for-life, reconcile, finalizers"),
            "{e}"
        );
    }
}
