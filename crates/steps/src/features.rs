//! The features a run takes: Gherkin texts carried by the executable (opconform's shipped
//! features) and the user's feature files and directories, read where they are — a failed
//! step names the user's own file and line — and handed to cucumber as one stream
//! ([`FeatureSet`] is the runner's [`cucumber::Parser`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Errors of gathering features.
#[derive(Debug, thiserror::Error)]
pub enum FeaturesError {
    /// A file named is not a feature file.
    #[error("{0}: not a feature file: expected a name ending in .feature")]
    NotAFeature(PathBuf),
    /// A directory named holds no feature file.
    #[error("{0}: no .feature file in this directory or below")]
    Empty(PathBuf),
    /// A path named does not exist.
    #[error("{0}: no such file or directory")]
    Missing(PathBuf),
    /// A directory could not be read.
    #[error("cannot read the directory {path}")]
    Read {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// One feature of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Feature {
    /// A text the executable carries, shown as `path` in reports.
    Embedded {
        /// The path reports name it by (`features/leader_with_lease.feature`).
        path: &'static str,
        /// Its Gherkin text.
        text: &'static str,
    },
    /// A feature file.
    File(PathBuf),
}

/// The features of one run, in the order they run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeatureSet {
    features: Vec<Feature>,
}

impl FeatureSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a text the executable carries.
    pub fn embedded(mut self, path: &'static str, text: &'static str) -> Self {
        self.features.push(Feature::Embedded { path, text });
        self
    }

    /// Adds a feature file, or every `.feature` file under a directory (sorted by path).
    ///
    /// # Errors
    /// A path that does not exist, a file that is not a `.feature`, a directory holding
    /// none, or one that cannot be read.
    pub fn path(mut self, path: impl AsRef<Path>) -> Result<Self, FeaturesError> {
        let path = path.as_ref();
        if path.is_dir() {
            let files = feature_files(path)?;
            self.features.extend(files.into_iter().map(Feature::File));
        } else if path.is_file() {
            if path.extension().is_none_or(|e| e != "feature") {
                return Err(FeaturesError::NotAFeature(path.to_path_buf()));
            }
            self.features.push(Feature::File(path.to_path_buf()));
        } else {
            return Err(FeaturesError::Missing(path.to_path_buf()));
        }
        Ok(self)
    }

    /// The features, in order.
    pub fn features(&self) -> &[Feature] {
        &self.features
    }

    /// How many features.
    pub fn len(&self) -> usize {
        self.features.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.features.is_empty()
    }
}

/// Every `.feature` file under `dir`, sorted by path.
fn feature_files(dir: &Path) -> Result<Vec<PathBuf>, FeaturesError> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        let read = |source| FeaturesError::Read {
            path: next.clone(),
            source,
        };
        for entry in std::fs::read_dir(&next).map_err(read)? {
            let path = entry.map_err(read)?.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "feature") {
                found.push(path);
            }
        }
    }
    if found.is_empty() {
        return Err(FeaturesError::Empty(dir.to_path_buf()));
    }
    found.sort();
    Ok(found)
}

/// Parses the set's features, in order, as cucumber's own parser parses a file.
impl cucumber::Parser<FeatureSet> for FeatureSet {
    type Cli = cucumber::cli::Empty;
    type Output = futures::stream::Iter<
        std::vec::IntoIter<Result<cucumber::gherkin::Feature, cucumber::parser::Error>>,
    >;

    fn parse(self, input: FeatureSet, _: Self::Cli) -> Self::Output {
        use cucumber::gherkin::{GherkinEnv, ParseFileError};
        let parsed = input
            .features
            .into_iter()
            .map(|feature| {
                let parsed = match feature {
                    Feature::File(path) => {
                        cucumber::gherkin::Feature::parse_path(&path, GherkinEnv::default())
                    }
                    Feature::Embedded { path, text } => {
                        cucumber::gherkin::Feature::parse(text, GherkinEnv::default())
                            .map(|mut f| {
                                f.path = Some(PathBuf::from(path));
                                f
                            })
                            .map_err(|source| ParseFileError::Parsing {
                                path: PathBuf::from(path),
                                error: None,
                                source,
                            })
                    }
                };
                parsed.map_err(|e| cucumber::parser::Error::Parsing(Arc::new(e)))
            })
            .collect::<Vec<_>>();
        futures::stream::iter(parsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt as _;

    fn parse(set: FeatureSet) -> Vec<Result<cucumber::gherkin::Feature, String>> {
        let stream = cucumber::Parser::parse(set.clone(), set, cucumber::cli::Empty);
        futures::executor::block_on(stream.collect::<Vec<_>>())
            .into_iter()
            .map(|r| r.map_err(|e| e.to_string()))
            .collect()
    }

    #[test]
    fn embedded_texts_files_and_directories_parse_in_order_each_under_its_own_path() {
        let user = tempfile::tempdir().unwrap();
        let nested = user.path().join("more");
        std::fs::create_dir(&nested).unwrap();
        std::fs::write(user.path().join("b.feature"), "Feature: b\n").unwrap();
        std::fs::write(nested.join("a.feature"), "Feature: nested a\n").unwrap();
        std::fs::write(nested.join("notes.txt"), "not a feature").unwrap();
        let one = user.path().join("b.feature");
        let set = FeatureSet::new()
            .embedded(
                "features/shipped.feature",
                "Feature: shipped\n  Scenario: s\n",
            )
            .path(&one)
            .unwrap()
            .path(user.path())
            .unwrap();
        let parsed = parse(set);
        let names: Vec<(String, PathBuf)> = parsed
            .into_iter()
            .map(|f| {
                let f = f.unwrap();
                (f.name.clone(), f.path.clone().unwrap())
            })
            .collect();
        assert_eq!(
            names,
            vec![
                ("shipped".into(), PathBuf::from("features/shipped.feature")),
                ("b".into(), one.clone()),
                ("b".into(), one),
                ("nested a".into(), nested.join("a.feature")),
            ]
        );
    }

    #[test]
    fn a_feature_that_does_not_parse_is_reported_under_its_path() {
        let parsed = parse(FeatureSet::new().embedded("features/broken.feature", "Scenario:"));
        let e = parsed[0].as_ref().unwrap_err();
        assert!(e.contains("features/broken.feature"), "{e}");
    }

    #[test]
    fn a_missing_path_a_non_feature_file_and_an_empty_directory_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nothing.feature");
        let e = FeatureSet::new().path(&missing).unwrap_err().to_string();
        assert_eq!(
            e,
            format!("{}: no such file or directory", missing.display())
        );
        let text = dir.path().join("notes.txt");
        std::fs::write(&text, "x").unwrap();
        let e = FeatureSet::new().path(&text).unwrap_err().to_string();
        assert!(
            e.ends_with("not a feature file: expected a name ending in .feature"),
            "{e}"
        );
        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        let e = FeatureSet::new().path(&empty).unwrap_err().to_string();
        assert!(e.contains("no .feature file"), "{e}");
    }
}
