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
    /// A feature is not Gherkin.
    #[error("{path}:{at}: not valid Gherkin: {expected}")]
    Parse {
        /// The file (or the shipped feature's path).
        path: PathBuf,
        /// `line:column` of the furthest point the parser reached.
        at: String,
        /// What the parser expected there.
        expected: String,
    },
    /// A feature file could not be read.
    #[error("cannot read the feature file {path}")]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
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
    /// How many times each scenario runs (`--runs N`); 0 and 1 both mean once.
    runs: usize,
}

/// The name of run `i` of `n` of a scenario repeated with `--runs N`.
pub fn run_name(scenario: &str, i: usize, n: usize) -> String {
    format!("{scenario} (run {i} of {n})")
}

/// A scenario's name and which of its runs it is, when it was repeated ([`run_name`]).
pub fn run_of(name: &str) -> (&str, Option<(usize, usize)>) {
    let parsed = name.strip_suffix(')').and_then(|rest| {
        let (scenario, runs) = rest.rsplit_once(" (run ")?;
        let (i, n) = runs.split_once(" of ")?;
        Some((scenario, (i.parse().ok()?, n.parse().ok()?)))
    });
    match parsed {
        Some((scenario, run)) => (scenario, Some(run)),
        None => (name, None),
    }
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

    /// Parses every feature, so that a run with one that is not Gherkin stops before it
    /// starts anything, naming the file, line and column.
    ///
    /// # Errors
    /// The first feature that does not parse or cannot be read.
    pub fn check(&self) -> Result<(), FeaturesError> {
        use cucumber::gherkin::{GherkinEnv, ParseFileError};
        for feature in &self.features {
            let (path, parsed) = match feature {
                Feature::File(path) => (
                    path.clone(),
                    cucumber::gherkin::Feature::parse_path(path, GherkinEnv::default()).map(drop),
                ),
                Feature::Embedded { path, text } => (
                    PathBuf::from(path),
                    cucumber::gherkin::Feature::parse(text, GherkinEnv::default())
                        .map(drop)
                        .map_err(|source| ParseFileError::Parsing {
                            path: PathBuf::from(path),
                            error: None,
                            source,
                        }),
                ),
            };
            match parsed {
                Ok(()) => {}
                Err(ParseFileError::Reading { path, source }) => {
                    return Err(FeaturesError::ReadFile { path, source });
                }
                Err(ParseFileError::Parsing { error, source, .. }) => {
                    let (mut at, mut expected) = parse_failure(&source.to_string());
                    // The parser's own reason, when it kept one, says more than the tokens;
                    // the line of an unknown keyword is where the keyword is, not where
                    // the parser gave up.
                    if let Some(env) = error.map(|e| e.to_string()) {
                        // (`UnknownKeyword`'s type is private to the gherkin crate: its
                        // message is what it exposes.)
                        if let Some(word) = env
                            .strip_prefix("Unknown keyword: '")
                            .and_then(|w| w.strip_suffix("'."))
                        {
                            let word = word.trim();
                            let text = match feature {
                                Feature::File(path) => {
                                    std::fs::read_to_string(path).unwrap_or_default()
                                }
                                Feature::Embedded { text, .. } => (*text).to_string(),
                            };
                            // The last line that begins with it at or before where the
                            // parser stopped (a description line above may begin alike).
                            let stopped: usize = at
                                .split(':')
                                .next()
                                .and_then(|l| l.parse().ok())
                                .unwrap_or(usize::MAX);
                            let found = text
                                .lines()
                                .enumerate()
                                .take(stopped)
                                .filter(|(_, l)| l.trim_start().starts_with(word))
                                .last();
                            let shown = found.map_or(word, |(_, line)| line.trim());
                            if let Some((n, line)) = found {
                                let column = line.len() - line.trim_start().len() + 1;
                                at = format!("{}:{column}", n + 1);
                            }
                            expected = format!(
                                "{shown:?} begins with no keyword: expected Feature, Rule, \
                                 Background, Scenario, Examples, a step (Given, When, Then, \
                                 And, But), a table, a doc string, a tag or a comment"
                            );
                        } else {
                            expected = env.trim().to_string();
                        }
                    }
                    return Err(FeaturesError::Parse { path, at, expected });
                }
            }
        }
        Ok(())
    }

    /// Runs each scenario `n` times, run `i` named [`run_name`]`(name, i, n)`: each run
    /// has its own cluster, history and timeline.
    pub fn runs(mut self, n: usize) -> Self {
        self.runs = n;
        self
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

/// The position and the expected tokens of a Gherkin parse error, from its message
/// (`Error at 4:3: {"Given", …}`: the gherkin crate keeps both fields private).
fn parse_failure(message: &str) -> (String, String) {
    let rest = message.strip_prefix("Error at ").unwrap_or(message);
    let Some((at, tokens)) = rest.split_once(": ") else {
        return ("1".into(), message.to_string());
    };
    let mut tokens: Vec<&str> = tokens
        .trim_matches(|c| c == '{' || c == '}')
        .split(", ")
        .map(|t| t.trim_matches('"'))
        .filter(|t| !t.is_empty())
        .collect();
    tokens.sort_unstable();
    tokens.dedup();
    let expected = if tokens.is_empty() {
        "unexpected text".to_string()
    } else {
        format!("expected one of {}", tokens.join(", "))
    };
    (at.to_string(), expected)
}

/// `feature` with each of its scenarios (its rules' too) `runs` times, named by
/// [`run_name`]; unchanged for one run.
fn repeated(mut feature: cucumber::gherkin::Feature, runs: usize) -> cucumber::gherkin::Feature {
    if runs <= 1 {
        return feature;
    }
    let repeat = |scenarios: &mut Vec<cucumber::gherkin::Scenario>| {
        *scenarios = scenarios
            .iter()
            .flat_map(|scenario| {
                (1..=runs).map(move |i| {
                    let mut run = scenario.clone();
                    run.name = run_name(&scenario.name, i, runs);
                    run
                })
            })
            .collect();
    };
    repeat(&mut feature.scenarios);
    for rule in &mut feature.rules {
        repeat(&mut rule.scenarios);
    }
    feature
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
                parsed
                    .map(|feature| repeated(feature, input.runs))
                    .map_err(|e| cucumber::parser::Error::Parsing(Arc::new(e)))
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
    fn with_runs_each_scenario_is_repeated_under_a_name_that_says_which_run_it_is() {
        let set = FeatureSet::new()
            .embedded(
                "features/f.feature",
                "Feature: f\n  Scenario: one\n    Given a cluster\n  Rule: r\n    Scenario: two\n      Given a cluster\n",
            )
            .runs(3);
        let feature = parse(set).remove(0).unwrap();
        let names: Vec<&str> = feature.scenarios.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["one (run 1 of 3)", "one (run 2 of 3)", "one (run 3 of 3)"]
        );
        assert_eq!(feature.rules[0].scenarios.len(), 3);
        assert_eq!(run_of("one (run 2 of 3)"), ("one", Some((2, 3))));
        assert_eq!(run_of("one"), ("one", None));
        assert_eq!(run_of("odd (run x of 3)"), ("odd (run x of 3)", None));
        let once = parse(
            FeatureSet::new()
                .embedded("f", "Feature: f\n  Scenario: one\n")
                .runs(1),
        );
        assert_eq!(once[0].as_ref().unwrap().scenarios[0].name, "one");
    }

    #[test]
    fn a_file_that_is_not_gherkin_is_refused_naming_its_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("broken.feature");
        std::fs::write(
            &file,
            "Feature: broken\n  Scenario: s\n    Given a cluster\n   Whatever this is\n",
        )
        .unwrap();
        let set = FeatureSet::new()
            .embedded("features/fine.feature", "Feature: fine\n")
            .path(&file)
            .unwrap();
        let e = set.check().unwrap_err().to_string();
        let prefix = format!(
            "{}:4:4: not valid Gherkin: \"Whatever this is\" begins with no keyword: expected",
            file.display()
        );
        assert!(e.starts_with(&prefix), "{e}");
        assert!(
            FeatureSet::new()
                .embedded("f", "Feature: f\n")
                .check()
                .is_ok()
        );
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
