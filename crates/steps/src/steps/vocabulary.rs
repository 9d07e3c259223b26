//! The step vocabulary as the README lists it, checked against the step definitions: every
//! step defined in `crates/steps/src/steps/` appears in the README's table with its exact
//! expression, and every expression the table lists is defined.

use std::collections::BTreeSet;
use std::path::Path;

/// The expressions of every step defined in the `.rs` files of `dir`, as written in their
/// `#[given]`, `#[when]` and `#[then]` attributes.
pub fn defined_steps(dir: &Path) -> std::io::Result<BTreeSet<String>> {
    let mut steps = BTreeSet::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        // This file's own tests hold example attributes.
        if path.extension().is_some_and(|e| e == "rs")
            && path.file_name().is_some_and(|n| n != "vocabulary.rs")
        {
            steps.extend(steps_in(&std::fs::read_to_string(&path)?));
        }
    }
    Ok(steps)
}

/// The step expressions in one source file.
pub fn steps_in(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = source;
    while let Some(at) = ["#[given(", "#[when(", "#[then("]
        .iter()
        .filter_map(|k| rest.find(k).map(|i| (i, k.len())))
        .min()
    {
        rest = &rest[at.0 + at.1..];
        let Some(open) = rest.find('"') else { break };
        let after = &rest[open + 1..];
        let Some(close) = after.find('"') else { break };
        out.push(after[..close].to_string());
        rest = &after[close + 1..];
    }
    out
}

/// The expressions the README's vocabulary lists: the first backticked text of each table
/// row between the `<!-- steps -->` and `<!-- /steps -->` markers.
pub fn listed_steps(readme: &str) -> BTreeSet<String> {
    let start = readme.find("<!-- steps -->").map_or(0, |i| i + 14);
    let end = readme[start..]
        .find("<!-- /steps -->")
        .map_or(readme.len(), |i| start + i);
    readme[start..end]
        .lines()
        .filter(|l| l.starts_with("| `"))
        .filter_map(|l| l[3..].split('`').next().map(str::to_string))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_read_from_their_attributes_plain_or_with_expressions() {
        let source = r#"
            #[given("a cluster")]
            async fn a(_: &mut World) {}
            #[then(
                expr = "within {duration} exactly one replica leads"
            )]
            async fn b(_: &mut World) {}
        "#;
        assert_eq!(
            steps_in(source),
            ["a cluster", "within {duration} exactly one replica leads"]
        );
    }

    #[test]
    fn the_readme_lists_exactly_the_steps_that_are_defined() {
        let root = crate::repository_root();
        let defined = defined_steps(&root.join("crates/steps/src/steps")).unwrap();
        let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
        let listed = listed_steps(&readme);
        let missing: Vec<_> = defined.difference(&listed).collect();
        let stale: Vec<_> = listed.difference(&defined).collect();
        assert!(
            missing.is_empty() && stale.is_empty(),
            "README's step vocabulary is out of date.\nDefined but not listed: {missing:#?}\nListed but not defined: {stale:#?}"
        );
    }
}
